package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
)

// row is one server's figures in one load of one comparison, one value per
// repetition.
type row struct {
	group, load, server, role string
	rate                      []float64 // offered rate (open loop)
	cpu, p50, p99, rps        []float64 // µs per request, µs, µs, requests/s
	cpuRatio, addedP50        []float64 // to the ceiling of the same repetition
	subjectRatio              []float64 // peers: the subject's CPU / this one's
}

type table struct {
	rows  []*row
	notes []string
}

func (t *table) get(group, load, server, role string) *row {
	for _, r := range t.rows {
		if r.group == group && r.load == load && r.server == server {
			return r
		}
	}
	r := &row{group: group, load: load, server: server, role: role}
	t.rows = append(t.rows, r)
	return r
}

// subject is the server each comparison is about; peers are compared to it.
var subjects = map[string]string{groupExtAuthz: "ext-authz", groupListener: "listener", groupEdge: edgeSubject}

const rolePeer = "peer"

// add records one repetition of one load; samples[0] is the ceiling's.
func (t *table) add(c *comparison, load string, rate float64, samples []loadgen.Sample) {
	sums := make([]loadgen.Summary, len(samples))
	for i := range samples {
		sums[i] = samples[i].Summary()
	}
	ceilingCPU := loadgen.Micros(samples[0].CPUPerRequest())
	var subjectCPU float64
	for i, s := range c.servers {
		if s.name == subjects[c.group] {
			subjectCPU = loadgen.Micros(samples[i].CPUPerRequest())
		}
	}
	for i, s := range c.servers {
		r := t.get(c.group, load, s.name, s.role)
		cpu := loadgen.Micros(samples[i].CPUPerRequest())
		r.cpu = append(r.cpu, cpu)
		r.cpuRatio = append(r.cpuRatio, cpu/ceilingCPU)
		r.p50 = append(r.p50, loadgen.Micros(sums[i].P50))
		r.p99 = append(r.p99, loadgen.Micros(sums[i].P99))
		r.addedP50 = append(r.addedP50, loadgen.Micros(sums[i].P50-sums[0].P50))
		r.rps = append(r.rps, samples[i].RPS())
		if rate > 0 {
			r.rate = append(r.rate, rate)
		}
		if s.role == rolePeer {
			r.subjectRatio = append(r.subjectRatio, subjectCPU/cpu)
		}
	}
}

// measured is one goal with the figure it is judged on.
type measured struct {
	goal  loadgen.Goal
	value float64
}

// goals lists the goals judged on r (loadgen's goals, defined once).
func goals(r *row) []measured {
	med := loadgen.Median
	switch {
	case r.server == "ext-authz" && r.load == openLoad:
		return []measured{{loadgen.ExtAuthzCPUOpen, med(r.cpuRatio)}, {loadgen.ExtAuthzAddedP50, med(r.addedP50)}}
	case r.server == "ext-authz":
		return []measured{{loadgen.ExtAuthzCPUClosed, med(r.cpuRatio)}}
	case r.server == extAuthzLimitOff:
		return []measured{{loadgen.ExtAuthzRateLimitCPU, med(r.subjectRatio)}}
	case r.group == groupExtAuthz && r.role == rolePeer:
		return []measured{{loadgen.ExtAuthzCPUvsOPA, med(r.subjectRatio)}}
	case r.server == "listener" && r.load == openLoad:
		return []measured{{loadgen.ListenerCPUOpen, med(r.cpuRatio)}}
	case r.group == groupListener && r.role == rolePeer && r.load == openLoad:
		return []measured{{loadgen.ListenerCPUvsKyma, med(r.subjectRatio)}}
	case r.server == edgeSubject && r.load == openLoad:
		return []measured{{loadgen.EdgeAddedP50, med(r.addedP50)}}
	case r.server == edgeAllow:
		return []measured{{loadgen.EdgeCPUvsAllow, med(r.subjectRatio)}}
	case r.server == edgeAllowTwin:
		return nil // the noise of the row above, judged against nothing
	case r.group == groupEdge && r.role == rolePeer:
		return []measured{{loadgen.EdgeCPUvsOPA, med(r.subjectRatio)}}
	case r.server == "skr-webhook":
		return []measured{{loadgen.WebhookAdmissionP99, med(r.p99) / 1000}}
	}
	return nil
}

// ratio is "1.04× (0.98–1.07)": the median and the range over repetitions.
func ratio(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	if len(v) == 1 {
		return fmt.Sprintf("%.2f×", v[0])
	}
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", loadgen.Median(v), slices.Min(v), slices.Max(v))
}

func num(v []float64, format string) string {
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf(format, loadgen.Median(v))
}

func (t *table) render(b *strings.Builder) (met, all int) {
	b.WriteString("| comparison | load | server | CPU µs / request | CPU / ceiling | twin / ceiling (noise) | p50 µs | p50 added µs | p99 µs | RPS | goal | met |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range t.rows {
		load := r.load
		if load == openLoad && len(r.rate) > 0 {
			load = fmt.Sprintf("open, %.0f/s (%.0f %% of the ceiling's saturated rate)", loadgen.Median(r.rate), 100*loadgen.OpenLoadFraction)
		}
		cpu, cpuRatio, noise, added := "–", "–", "–", "–"
		if len(r.cpu) > 0 {
			cpu = num(r.cpu, "%.1f")
		}
		if r.role != roleCeiling && len(r.cpuRatio) > 0 {
			cpuRatio = ratio(r.cpuRatio)
			added = num(r.addedP50, "%+.0f")
		}
		if r.role != roleCeiling && r.role != roleTwin {
			if twin := t.twin(r); twin != nil {
				noise = ratio(twin.cpuRatio)
			}
		}
		var goalText, metText []string
		for _, m := range goals(r) {
			all++
			if m.goal.Met(m.value) {
				met++
			}
			goalText = append(goalText, describe(r, m))
			metText = append(metText, m.goal.Verdict(m.value))
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.group, load, r.server, cpu, cpuRatio, noise, num(r.p50, "%.0f"), added, num(r.p99, "%.0f"), num(r.rps, "%.0f"),
			strings.Join(goalText, "; "), strings.Join(metText, "; "))
	}
	return met, all
}

// describe names the figure a goal is judged on, with its value.
func describe(r *row, m measured) string {
	switch m.goal {
	case loadgen.ExtAuthzCPUvsOPA:
		return fmt.Sprintf("ext-authz's CPU / this: %.3f×, %s", m.value, m.goal)
	case loadgen.ExtAuthzRateLimitCPU:
		return fmt.Sprintf("ext-authz's CPU (rate limit on) / this: %.3f×, %s", m.value, m.goal)
	case loadgen.ListenerCPUvsKyma:
		return fmt.Sprintf("the listener's CPU / this: %.2f×, %s", m.value, m.goal)
	case loadgen.EdgeCPUvsOPA, loadgen.EdgeCPUvsAllow:
		return fmt.Sprintf("the edge's CPU / this: %.3f×, %s", m.value, m.goal)
	case loadgen.ExtAuthzAddedP50, loadgen.EdgeAddedP50:
		return fmt.Sprintf("p50 added %s", m.goal)
	case loadgen.WebhookAdmissionP99:
		return fmt.Sprintf("p99 %s", m.goal)
	}
	return "CPU " + m.goal.String()
}

// twin is the twin row of r's comparison and load.
func (t *table) twin(r *row) *row {
	for _, o := range t.rows {
		if o.group == r.group && o.load == r.load && o.role == roleTwin {
			return o
		}
	}
	return nil
}

// goalList describes every goal of the table.
func goalList(b *strings.Builder) {
	for _, g := range []loadgen.Goal{loadgen.ExtAuthzCPUClosed, loadgen.ExtAuthzCPUOpen, loadgen.ExtAuthzCPUvsOPA, loadgen.ExtAuthzRateLimitCPU, loadgen.ExtAuthzAddedP50, loadgen.ListenerCPUOpen, loadgen.ListenerCPUvsKyma, loadgen.EdgeCPUvsAllow, loadgen.EdgeCPUvsOPA, loadgen.EdgeAddedP50, loadgen.WebhookAdmissionP99} {
		fmt.Fprintf(b, "- %s %s (issue %d)\n", g.What, g, g.Issue)
	}
}

func seconds(d time.Duration) string { return d.Round(time.Second).String() }
