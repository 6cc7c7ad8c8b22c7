//go:build !linux

package pathlock

import "syscall"

// dieWithParent: only Linux kills a child with its parent; elsewhere TestMain stops the servers.
func dieWithParent() *syscall.SysProcAttr {
	return nil
}
