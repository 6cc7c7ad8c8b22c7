package pathlock

import "syscall"

// dieWithParent has a server killed when the test process dies (PR_SET_PDEATHSIG), so that a
// run cut short leaves no server behind.
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
