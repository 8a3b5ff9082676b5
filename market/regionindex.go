package market

// regionList is one region's orders at one price level, in arrival order:
// an index that lets a bid constrained to some regions visit only the asks
// in those regions instead of passing over every other one.
type regionList struct {
	region     string
	head, tail *entry
	n          int
}

// linkRegion appends e (already in level l's FIFO) to l's list of its
// region, creating the list.
func (s *bookSide) linkRegion(l *level, e *entry) {
	var rl *regionList
	for _, r := range l.regions {
		if r.region == e.o.Facts.Region {
			rl = r
			break
		}
	}
	if rl == nil {
		if n := len(s.rfree); n > 0 {
			rl = s.rfree[n-1]
			s.rfree = s.rfree[:n-1]
		} else {
			rl = new(regionList)
		}
		rl.region = e.o.Facts.Region
		l.regions = append(l.regions, rl)
	}
	e.rl, e.rnext, e.rprev = rl, nil, rl.tail
	if rl.tail != nil {
		rl.tail.rnext = e
	} else {
		rl.head = e
	}
	rl.tail = e
	rl.n++
}

// unlinkRegion takes e out of its region list, dropping the list when it
// empties.
func (s *bookSide) unlinkRegion(l *level, e *entry) {
	rl := e.rl
	if e.rprev != nil {
		e.rprev.rnext = e.rnext
	} else {
		rl.head = e.rnext
	}
	if e.rnext != nil {
		e.rnext.rprev = e.rprev
	} else {
		rl.tail = e.rprev
	}
	e.rl, e.rnext, e.rprev = nil, nil, nil
	rl.n--
	if rl.n > 0 {
		return
	}
	for i, r := range l.regions {
		if r == rl {
			last := len(l.regions) - 1
			l.regions[i] = l.regions[last]
			l.regions[last] = nil
			l.regions = l.regions[:last]
			break
		}
	}
	*rl = regionList{}
	if len(s.rfree) < freeEntries {
		s.rfree = append(s.rfree, rl)
	}
}

// regionCursor walks the lists of the regions a bid accepts at one level,
// merged back into arrival order (each list is in arrival order, so the
// next order is the one with the lowest seq among the lists' heads). It
// holds up to maxCursorLists lists, without allocating.
type regionCursor struct {
	heads [maxCursorLists]*entry
	n     int
}

const maxCursorLists = 8

// reset points the cursor at level l's orders in regions the patterns
// match. It reports false when more lists match than it holds: the caller
// then scans the whole level.
func (c *regionCursor) reset(l *level, patterns []string) bool {
	c.n = 0
	for _, rl := range l.regions {
		for _, p := range patterns {
			if regionMatches(p, rl.region) {
				if c.n == maxCursorLists {
					return false
				}
				c.heads[c.n] = rl.head
				c.n++
				break
			}
		}
	}
	return true
}

// next returns the next order in arrival order, or nil.
func (c *regionCursor) next() *entry {
	k := -1
	for i := range c.n {
		if e := c.heads[i]; e != nil && (k < 0 || e.seq < c.heads[k].seq) {
			k = i
		}
	}
	if k < 0 {
		return nil
	}
	e := c.heads[k]
	c.heads[k] = e.rnext
	return e
}
