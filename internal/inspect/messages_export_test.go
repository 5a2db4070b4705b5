package inspect

// SetSearchWindow makes MessagePage's search window n rows until the
// returned function restores it.
func SetSearchWindow(n int) (restore func()) {
	old := searchWindow
	searchWindow = n
	return func() { searchWindow = old }
}
