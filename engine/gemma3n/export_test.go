package gemma3n

// SetPackMinCache lowers the smallest packed size that gets a cache file,
// for tests; it returns a function restoring the old value.
func SetPackMinCache(n int64) func() {
	old := packMinCache
	packMinCache = n
	return func() { packMinCache = old }
}
