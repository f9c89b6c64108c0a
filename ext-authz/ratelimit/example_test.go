package ratelimit_test

import (
	"fmt"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
)

// A runtime of class "trial" may send 2 requests at once and one per
// second after that; the third at once is refused, told to come back when
// its next token is there, and named in the report.
func ExampleLimiter() {
	classes, err := ratelimit.ParseClasses("trial=1/2")
	if err != nil {
		panic(err)
	}
	l, err := ratelimit.New(ratelimit.Config{Mode: ratelimit.ModeEnforce, Default: ratelimit.Limit{Rate: 100, Burst: 10_000}, Classes: classes})
	if err != nil {
		panic(err)
	}
	now := time.Now()
	for range 3 {
		ok, retryAfter := l.Allow("runtime-1", "trial", now)
		fmt.Println(ok, retryAfter)
	}
	ok, _ := l.Allow("runtime-1", "trial", now.Add(time.Second))
	fmt.Println("a second later:", ok)
	top, _ := l.Report()
	fmt.Printf("%+v\n", top)
	// Output:
	// true 0s
	// true 0s
	// false 1s
	// a second later: true
	// [{Runtime:runtime-1 Over:1}]
}
