package hostmem

import (
	"os"
	"path/filepath"
	"testing"
)

// writeTree creates files under root from a map of relative path to content.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOSBudgets(t *testing.T) {
	const meminfo = "MemTotal:       1000000 kB\nMemAvailable:    800000 kB\n"
	cases := []struct {
		name  string
		files map[string]string
		avail int64
	}{{
		name:  "meminfo only",
		files: map[string]string{"proc/meminfo": meminfo},
		avail: 800000 * 1024,
	}, {
		// The parent's limit binds before the process's own; the child's
		// inactive file cache counts as available.
		name: "cgroup v2, parent limit",
		files: map[string]string{
			"proc/meminfo":                          meminfo,
			"proc/self/cgroup":                      "0::/job/task\n",
			"sys/fs/cgroup/job/memory.max":          "300000000\n",
			"sys/fs/cgroup/job/memory.current":      "200000000\n",
			"sys/fs/cgroup/job/memory.stat":         "anon 1\ninactive_file 50000000\n",
			"sys/fs/cgroup/job/task/memory.max":     "max\n",
			"sys/fs/cgroup/job/task/memory.current": "100\n",
		},
		avail: 300000000 - (200000000 - 50000000),
	}, {
		name: "cgroup v1, no limit in the own group",
		files: map[string]string{
			"proc/meminfo":     meminfo,
			"proc/self/cgroup": "4:memory:/api/x\n3:cpuset:/\n0::/\n",
			"sys/fs/cgroup/memory/api/x/memory.limit_in_bytes": "9223372036854771712\n",
			"sys/fs/cgroup/memory/api/x/memory.usage_in_bytes": "5000\n",
			"sys/fs/cgroup/memory/api/memory.limit_in_bytes":   "100000\n",
			"sys/fs/cgroup/memory/api/memory.usage_in_bytes":   "40000\n",
		},
		avail: 60000,
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, c.files)
			b := budget{avail: 1 << 62}
			osBudgets(root, &b)
			if b.avail != c.avail {
				t.Fatalf("available %d (%s), want %d", b.avail, b.from, c.avail)
			}
		})
	}
}
