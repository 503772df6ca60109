package main

import (
	"context"
	"fmt"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is a loopback node whose files' data goes through the page cache; every other
// operation (create, mkdir, rename, unlink, chmod, ...) reaches the folder below at once.
type node struct {
	fs.LoopbackNode
	cache *pageCache
}

func newRoot(path string, cache *pageCache) (fs.InodeEmbedder, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil, err
	}
	root := &fs.LoopbackRoot{Path: path, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, cache: cache}
	}
	rootNode := root.NewNode(root, nil, "", &st)
	root.RootNode = rootNode
	return rootNode, nil
}

func (n *node) path() string {
	return n.RootData.Path + "/" + n.Path(n.Root())
}

// underlying strips what the handle does itself: O_APPEND (the kernel gives the offset),
// write-only (a first write into a page reads the rest of it).
func underlying(flags uint32) int {
	f := int(flags) &^ (unix.O_APPEND | unix.O_CREAT | unix.O_EXCL | unix.O_TRUNC | fuse.FMODE_EXEC)
	if f&unix.O_ACCMODE == unix.O_WRONLY {
		f = f&^unix.O_ACCMODE | unix.O_RDWR
	}
	return f
}

func (n *node) openHandle(path string, flags uint32) (*handle, syscall.Errno) {
	fd, err := unix.Open(path, underlying(flags)|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	ino, _, err := inoOf(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fs.ToErrno(err)
	}
	if flags&unix.O_TRUNC != 0 {
		n.cache.truncate(ino, 0) // the file below was truncated by the open
		if err := unix.Ftruncate(fd, 0); err != nil {
			unix.Close(fd)
			return nil, fs.ToErrno(err)
		}
	}
	return &handle{fd: fd, ino: ino, cache: n.cache,
		writable: int(flags)&unix.O_ACCMODE != unix.O_RDONLY,
		sync:     int(flags)&(unix.O_SYNC|unix.O_DSYNC) != 0}, 0
}

// Open answers with direct I/O: the kernel keeps no copy of the data, so what the
// page cache drops is gone for readers too.
func (n *node) Open(_ context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h, errno := n.openHandle(n.path(), flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return h, fuse.FOPEN_DIRECT_IO, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	inode, fh, _, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if r, ok := fh.(fs.FileReleaser); ok {
		r.Release(ctx) // the loopback's own handle: ours replaces it
	}
	// The new inode joins the tree once Create returns: name the file through its folder.
	h, errno := n.openHandle(n.path()+"/"+name, flags)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return inode, h, fuse.FOPEN_DIRECT_IO, 0
}

// Getattr reports the size with the held data.
func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	var err error
	if h, ok := f.(*handle); ok {
		err = syscall.Fstat(h.fd, &st)
	} else {
		err = syscall.Lstat(n.path(), &st)
	}
	if err != nil {
		return fs.ToErrno(err)
	}
	out.FromStat(&st)
	if size, ok := n.cache.size(st.Ino); ok {
		out.Size = uint64(size)
		out.Blocks = (out.Size + 511) / 512
	}
	return 0
}

// Setattr truncates the file below at once (metadata passes through) and cuts the held
// data at the new size; the rest is the loopback's.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if size, ok := in.GetSize(); ok {
		ino, err := n.truncateBelow(f, int64(size))
		if err != nil {
			return fs.ToErrno(err)
		}
		n.cache.truncate(ino, int64(size))
		in.Valid &^= fuse.FATTR_SIZE
	}
	if errno := n.LoopbackNode.Setattr(ctx, nil, in, out); errno != 0 {
		return errno
	}
	return n.Getattr(ctx, f, out)
}

// truncateBelow truncates the file below (through the handle when there is one: the
// file may have no name left) and returns its inode number.
func (n *node) truncateBelow(f fs.FileHandle, size int64) (uint64, error) {
	if h, ok := f.(*handle); ok {
		return h.ino, unix.Ftruncate(h.fd, size)
	}
	var st unix.Stat_t
	if err := unix.Lstat(n.path(), &st); err != nil {
		return 0, err
	}
	return st.Ino, unix.Truncate(n.path(), size)
}

// inoAt is the inode number of name in this folder, 0 when there is none.
func (n *node) inoAt(name string) uint64 {
	var st unix.Stat_t
	if unix.Lstat(n.path()+"/"+name, &st) != nil || st.Nlink > 1 {
		return 0
	}
	return st.Ino
}

// Unlink forgets the held data of the file removed (its last name).
func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	ino := n.inoAt(name)
	errno := n.LoopbackNode.Unlink(ctx, name)
	if errno == 0 && ino != 0 {
		n.cache.forget(ino)
	}
	return errno
}

// Rename forgets the held data of a file the rename replaces.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	var replaced uint64
	if p, ok := newParent.(*node); ok && flags&unix.RENAME_EXCHANGE == 0 {
		replaced = p.inoAt(newName)
	}
	errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags)
	if errno == 0 && replaced != 0 && replaced != n.inoAt(name) {
		n.cache.forget(replaced)
	}
	return errno
}

// handle is an open file: writes held, reads merged, fsync writes through.
type handle struct {
	fd       int
	ino      uint64
	cache    *pageCache
	writable bool
	sync     bool // O_SYNC / O_DSYNC: every write is synced before it returns
}

func (h *handle) Read(_ context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.cache.read(h.ino, h.fd, dest, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(_ context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if err := h.cache.write(h.ino, h.fd, data, off); err != nil {
		return 0, fs.ToErrno(err)
	}
	if h.sync {
		if errno := h.Fsync(context.Background(), 1); errno != 0 {
			return 0, errno
		}
	}
	return uint32(len(data)), 0
}

// Fsync (and fdatasync: flags bit 0) writes the file's held data through, then syncs.
func (h *handle) Fsync(_ context.Context, flags uint32) syscall.Errno {
	fd := h.fd
	if !h.writable {
		// A read-only handle may sync too: write through a writable twin of its file.
		twin, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", h.fd), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fs.ToErrno(err)
		}
		defer unix.Close(twin)
		fd = twin
	}
	if err := h.cache.writeBack(h.ino, fd); err != nil {
		return fs.ToErrno(err)
	}
	var err error
	if flags&1 != 0 {
		err = unix.Fdatasync(fd)
	} else {
		err = unix.Fsync(fd)
	}
	return fs.ToErrno(err)
}

// Flush (each close) writes nothing: closing a file does not sync it.
func (h *handle) Flush(context.Context) syscall.Errno { return 0 }

func (h *handle) Release(context.Context) syscall.Errno {
	return fs.ToErrno(unix.Close(h.fd))
}

func (h *handle) Allocate(_ context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	if err := unix.Fallocate(h.fd, mode, int64(off), int64(size)); err != nil {
		return fs.ToErrno(err)
	}
	if mode&unix.FALLOC_FL_KEEP_SIZE == 0 {
		h.cache.extend(h.ino, int64(off+size))
	}
	return 0
}

var (
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
	_ fs.NodeRenamer   = (*node)(nil)
	_ fs.FileReader    = (*handle)(nil)
	_ fs.FileWriter    = (*handle)(nil)
	_ fs.FileFsyncer   = (*handle)(nil)
	_ fs.FileFlusher   = (*handle)(nil)
	_ fs.FileReleaser  = (*handle)(nil)
	_ fs.FileAllocater = (*handle)(nil)
)
