package pathlock

// SetExampleAddr points the examples (example_test.go, package pathlock_test) at the shared
// server; they set it when their package is initialised, before TestMain runs.
var SetExampleAddr = func(addr string) {}
