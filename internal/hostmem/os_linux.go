package hostmem

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// osBudgets considers MemAvailable and the cgroup limits of the process,
// reading /proc and /sys/fs/cgroup under root ("/" except in tests).
// Missing or unreadable files mean no such budget: Check must never fail
// for lack of information.
func osBudgets(root string, b *budget) {
	if kb, ok := fieldOf(filepath.Join(root, "proc/meminfo"), "MemAvailable:"); ok {
		b.consider(kb*1024, "MemAvailable of /proc/meminfo")
	}
	cg, err := os.ReadFile(filepath.Join(root, "proc/self/cgroup"))
	if err != nil {
		return
	}
	for line := range strings.Lines(string(cg)) {
		// hierarchy-ID:controllers:path; v2 has ID 0 and no controllers.
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			cgroupBudgets(filepath.Join(root, "sys/fs/cgroup"), parts[2], cgroupV2, b)
		case hasController(parts[1], "memory"):
			cgroupBudgets(filepath.Join(root, "sys/fs/cgroup/memory"), parts[2], cgroupV1, b)
		}
	}
}

// cgroupFiles names a cgroup version's files and cache statistic.
type cgroupFiles struct{ limit, usage, inactiveFile string }

var (
	cgroupV2 = cgroupFiles{"memory.max", "memory.current", "inactive_file"}
	cgroupV1 = cgroupFiles{"memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"}
)

// unlimited is where cgroup v1 limits start to mean "none": v1 reports no
// limit as the largest page-aligned int64 rather than a word.
const unlimited = 1 << 62

// cgroupBudgets considers the limit of the cgroup at path under mount and
// of every cgroup above it, since each ancestor's limit binds too. In a
// cgroup namespace the process's own cgroup is mounted at mount itself and
// path is "/", so the walk covers it as well.
func cgroupBudgets(mount, path string, f cgroupFiles, b *budget) {
	dir := filepath.Join(mount, path)
	for {
		limit, okL := readInt(filepath.Join(dir, f.limit))
		usage, okU := readInt(filepath.Join(dir, f.usage))
		if okL && okU && limit < unlimited {
			// The kernel reclaims inactive file cache before it kills
			// anything, so it counts as available.
			cache, _ := fieldOf(filepath.Join(dir, "memory.stat"), f.inactiveFile)
			b.consider(limit-max(0, usage-cache), "the cgroup memory limit of "+dir)
		}
		if dir == mount || len(dir) < len(mount) {
			return
		}
		dir = filepath.Dir(dir)
	}
}

func hasController(list, name string) bool {
	for c := range strings.SplitSeq(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}

// readInt reads a file holding one integer; "max" (no v2 limit) and
// anything unreadable report false.
func readInt(path string) (int64, bool) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(raw)), 10, 64)
	return n, err == nil
}

// fieldOf returns the integer after key on the line of file path that
// starts with key ("MemAvailable:" in meminfo, "inactive_file" in
// memory.stat).
func fieldOf(path, key string) (int64, bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == key {
			n, err := strconv.ParseInt(fields[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
