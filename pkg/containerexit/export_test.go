package containerexit

import "time"

// SetListAllTimeout changes c's bound on ListAll, for a test whose answer is large enough to
// outlast CallTimeout under the race detector on a loaded machine.
func SetListAllTimeout(c *CRI, d time.Duration) { c.listTimeout = d }
