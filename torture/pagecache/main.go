// Command pagecache mounts a folder through FUSE with a page cache of its own: file data
// written and not yet fsynced (or fdatasynced, or written through an O_SYNC/O_DSYNC
// handle) is held in memory, where reads see it over the file below; a sync writes it
// through. Told "drop" on its control socket, it forgets every held write, as an OS
// crash or a power cut loses the kernel's dirty pages, while the machine keeps running.
// Metadata operations (create, rename, unlink, truncate, chmod, mkdir) reach the folder
// below at once and are never lost.
//
//	pagecache -root DIR -control SOCKET MOUNTPOINT
//
// The control socket answers one line per command line:
//
//	unsynced -> "unsynced BYTES FILES"
//	drop     -> "dropped BYTES FILES"
//
// SIGTERM or SIGINT unmounts and exits 0.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func serveControl(ln net.Listener, cache *pageCache) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			lines := bufio.NewScanner(conn)
			for lines.Scan() {
				var reply string
				switch cmd := strings.TrimSpace(lines.Text()); cmd {
				case "unsynced":
					b, f := cache.unsynced()
					reply = fmt.Sprintf("unsynced %d %d", b, f)
				case "drop":
					b, f := cache.drop()
					log.Printf("dropped %d unsynced bytes of %d files", b, f)
					reply = fmt.Sprintf("dropped %d %d", b, f)
				default:
					reply = fmt.Sprintf("error: unknown command %q (allowed: unsynced, drop)", cmd)
				}
				if _, err := fmt.Fprintln(conn, reply); err != nil {
					return
				}
			}
		}()
	}
}

func main() {
	rootDir := flag.String("root", "", "the folder whose files the mount shows (required)")
	control := flag.String("control", "", "the control socket's path (required)")
	flag.Parse()
	if *rootDir == "" || *control == "" || flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: pagecache -root DIR -control SOCKET MOUNTPOINT")
		os.Exit(2)
	}
	cache := newPageCache()
	root, err := newRoot(*rootDir, cache)
	if err != nil {
		log.Fatalf("root %s: %v", *rootDir, err)
	}
	os.Remove(*control) // a socket left by an earlier run of ours at that path
	ln, err := net.Listen("unix", *control)
	if err != nil {
		log.Fatalf("control socket %s: %v", *control, err)
	}
	os.Chmod(*control, 0o600)
	// No attribute or entry caching in the kernel: after a drop, sizes must come from us.
	zero := time.Duration(0)
	server, err := fs.Mount(flag.Arg(0), root, &fs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther: true, FsName: *rootDir, Name: "pagecache", DirectMount: true,
		},
		AttrTimeout: &zero, EntryTimeout: &zero, NegativeTimeout: &zero,
	})
	if err != nil {
		log.Fatalf("mount %s: %v", flag.Arg(0), err)
	}
	go serveControl(ln, cache)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		ln.Close()
		if err := server.Unmount(); err != nil {
			log.Printf("unmount: %v", err)
		}
	}()
	log.Printf("mounted %s on %s", *rootDir, flag.Arg(0))
	server.Wait()
	os.Remove(*control)
}
