package main

import (
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// pageSize is the granularity of the held data, as the kernel's page cache's.
const pageSize = 4096

// pending is one file's data written and not yet synced: whole pages (the first write
// into a page reads the rest of it from the file below, as the kernel fills a page
// before it dirties it) and the size the file has with them.
type pending struct {
	pages map[int64][]byte
	size  int64
}

// pageCache holds every file's unsynced data, keyed by the inode number of the file
// below (not by the FUSE node: the kernel may forget a node whose file is closed while
// its data is still unsynced, and a later open must see that data again).
type pageCache struct {
	mu    sync.Mutex
	files map[uint64]*pending
}

func newPageCache() *pageCache {
	return &pageCache{files: map[uint64]*pending{}}
}

func inoOf(fd int) (uint64, int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, 0, err
	}
	return st.Ino, st.Size, nil
}

// write holds data at off in ino's pages; fd (readable) fills a page's other bytes.
func (c *pageCache) write(ino uint64, fd int, data []byte, off int64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.files[ino]
	if p == nil {
		_, size, err := inoOf(fd)
		if err != nil {
			return err
		}
		p = &pending{pages: map[int64][]byte{}, size: size}
		c.files[ino] = p
	}
	for done := 0; done < len(data); {
		at := off + int64(done)
		idx, in := at/pageSize, int(at%pageSize)
		page := p.pages[idx]
		if page == nil {
			page = make([]byte, pageSize)
			if idx*pageSize < p.size {
				// Short reads (the file below ends in this page) leave zeros.
				if _, err := unix.Pread(fd, page, idx*pageSize); err != nil {
					return err
				}
			}
			p.pages[idx] = page
		}
		done += copy(page[in:], data[done:])
	}
	if end := off + int64(len(data)); end > p.size {
		p.size = end
	}
	return nil
}

// read fills dest from off: held pages over the file below, up to the file's size.
func (c *pageCache) read(ino uint64, fd int, dest []byte, off int64) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.files[ino]
	if p == nil {
		n, err := unix.Pread(fd, dest, off)
		if n < 0 {
			n = 0
		}
		return n, err
	}
	if off >= p.size {
		return 0, nil
	}
	n := len(dest)
	if int64(n) > p.size-off {
		n = int(p.size - off)
	}
	for done := 0; done < n; {
		at := off + int64(done)
		idx, in := at/pageSize, int(at%pageSize)
		chunk := pageSize - in
		if chunk > n-done {
			chunk = n - done
		}
		if page := p.pages[idx]; page != nil {
			copy(dest[done:done+chunk], page[in:in+chunk])
		} else {
			part := dest[done : done+chunk]
			got, err := unix.Pread(fd, part, at)
			if err != nil {
				return done, err
			}
			clear(part[max(got, 0):]) // beyond the file below: a hole up to the held size
		}
		done += chunk
	}
	return n, nil
}

// size is ino's size with its held data, ok false when nothing is held.
func (c *pageCache) size(ino uint64) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.files[ino]; p != nil {
		return p.size, true
	}
	return 0, false
}

// truncate cuts ino's held data at size (the file below is truncated by the caller).
func (c *pageCache) truncate(ino uint64, size int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.files[ino]
	if p == nil {
		return
	}
	for idx, page := range p.pages {
		switch start := idx * pageSize; {
		case start >= size:
			delete(p.pages, idx)
		case start+pageSize > size:
			clear(page[size-start:])
		}
	}
	p.size = size
}

// extend records a size grown by fallocate.
func (c *pageCache) extend(ino uint64, end int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.files[ino]; p != nil && end > p.size {
		p.size = end
	}
}

// writeBack writes ino's held data to fd (writable) and forgets it; the caller syncs fd.
func (c *pageCache) writeBack(ino uint64, fd int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.files[ino]
	if p == nil {
		return nil
	}
	idxs := make([]int64, 0, len(p.pages))
	for idx := range p.pages {
		idxs = append(idxs, idx)
	}
	sort.Slice(idxs, func(i, j int) bool { return idxs[i] < idxs[j] })
	for _, idx := range idxs {
		start := idx * pageSize
		if start >= p.size {
			continue
		}
		page := p.pages[idx][:min(int64(pageSize), p.size-start)]
		for len(page) > 0 {
			n, err := unix.Pwrite(fd, page, start)
			if err != nil {
				return err // kept: a later fsync tries again
			}
			page, start = page[n:], start+int64(n)
		}
	}
	// A size held past the last page written (a write of zeros' worth of hole).
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Size < p.size {
		if err := unix.Ftruncate(fd, p.size); err != nil {
			return err
		}
	}
	delete(c.files, ino)
	return nil
}

// forget drops ino's held data (its file was removed).
func (c *pageCache) forget(ino uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.files, ino)
}

// unsynced is how many bytes and files are held.
func (c *pageCache) unsynced() (bytes int64, files int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.files {
		files++
		for idx := range p.pages {
			if start := idx * pageSize; start < p.size {
				bytes += min(int64(pageSize), p.size-start)
			}
		}
	}
	return bytes, files
}

// drop forgets every held write: the OS crash. Returns what unsynced reported.
func (c *pageCache) drop() (bytes int64, files int) {
	bytes, files = c.unsynced()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.files = map[uint64]*pending{}
	return bytes, files
}
