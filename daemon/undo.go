package daemon

// undoStack is what a gateway's start has acquired, as the functions that
// release it. Each start step that acquires something pushes its undo;
// Run unwinds the stack once when it returns, whether a step failed or
// the gateway stopped, so every release has one owner and runs in the
// reverse order of acquisition. Only Run's goroutine uses it.
type undoStack struct {
	fns []func()
}

// push adds f, to run at unwind before everything pushed earlier. The
// returned drop takes f off again, for a thing whose ownership passes on
// (the router closes the devices it ran).
func (u *undoStack) push(f func()) (drop func()) {
	i := len(u.fns)
	u.fns = append(u.fns, f)
	return func() { u.fns[i] = nil }
}

// unwind runs the undos, last pushed first, and empties the stack.
func (u *undoStack) unwind() {
	for i := len(u.fns) - 1; i >= 0; i-- {
		if f := u.fns[i]; f != nil {
			f()
		}
	}
	u.fns = nil
}
