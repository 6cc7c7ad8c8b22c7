package pathlock_test

import "github.com/pathlock/pathlock/clients/go"

func init() {
	pathlock.SetExampleAddr = func(a string) { addr = a }
}
