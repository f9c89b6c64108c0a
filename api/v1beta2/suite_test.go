package v1beta2_test

import (
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

var env *testenv.Env

func TestCRDs(t *testing.T) {
	testenv.SkipIfShort(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "CRDs against a real API server")
}

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.Start("kcp")
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})
