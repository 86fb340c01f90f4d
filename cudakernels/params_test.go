package cudakernels

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unsafe"
)

// cField is one field of csrc/params.cuh's struct Params.
type cField struct{ name, typ string }

var (
	cStruct    = regexp.MustCompile(`(?s)struct Params \{(.*?)\n\};`)
	cComment   = regexp.MustCompile(`//[^\n]*`)
	cFieldDecl = regexp.MustCompile(`^(const void\*|void\*|long long|double)\s+(.+)$`)
)

// parseParams reads the fields of struct Params from C source.
func parseParams(t *testing.T, src string) []cField {
	t.Helper()
	m := cStruct.FindStringSubmatch(src)
	if m == nil {
		t.Fatal("csrc/params.cuh: no struct Params")
	}
	var fields []cField
	for _, decl := range strings.Split(cComment.ReplaceAllString(m[1], ""), ";") {
		decl = strings.Join(strings.Fields(decl), " ")
		if decl == "" {
			continue
		}
		d := cFieldDecl.FindStringSubmatch(decl)
		if d == nil {
			t.Fatalf("csrc/params.cuh: field %q is not a pointer, long long or double", decl)
		}
		for _, name := range strings.Split(d[2], ",") {
			fields = append(fields, cField{strings.TrimSpace(name), d[1]})
		}
	}
	return fields
}

// goTypeOf is the Go type each C field type must have in kernelParams.
var goTypeOf = map[string]reflect.Kind{
	"const void*": reflect.Uint64, "void*": reflect.Uint64, "long long": reflect.Int64, "double": reflect.Float64,
}

// sameName compares a C snake_case name with a Go CamelCase one.
func sameName(c, goName string) bool {
	return strings.EqualFold(strings.ReplaceAll(c, "_", ""), goName)
}

// checkMirror reports every difference between the C fields and the Go
// struct type.
func checkMirror(fields []cField, typ reflect.Type) []string {
	var diffs []string
	if typ.NumField() != len(fields) {
		diffs = append(diffs, "field counts differ")
	}
	for i := range min(typ.NumField(), len(fields)) {
		f, c := typ.Field(i), fields[i]
		if !sameName(c.name, f.Name) || f.Type.Kind() != goTypeOf[c.typ] || f.Offset != uintptr(8*i) {
			diffs = append(diffs, "field "+f.Name+" ("+f.Type.String()+") against "+c.typ+" "+c.name)
		}
	}
	return diffs
}

// TestParamsMirror fails when kernelParams and csrc/params.cuh's Params
// differ in the names, order, count or types of their fields.
func TestParamsMirror(t *testing.T) {
	src, err := os.ReadFile("csrc/params.cuh")
	if err != nil {
		t.Fatal(err)
	}
	fields := parseParams(t, string(src))
	typ := reflect.TypeFor[kernelParams]()
	for _, d := range checkMirror(fields, typ) {
		t.Error(d)
	}
	if got, want := unsafe.Sizeof(kernelParams{}), uintptr(8*len(fields)); got != want {
		t.Errorf("kernelParams has %d bytes, Params %d", got, want)
	}
}

// TestParamsMirrorDetects checks that the comparison catches a reordered, a
// retyped and a missing field.
func TestParamsMirrorDetects(t *testing.T) {
	src, err := os.ReadFile("csrc/params.cuh")
	if err != nil {
		t.Fatal(err)
	}
	fields := parseParams(t, string(src))
	typ := reflect.TypeFor[kernelParams]()
	swapped := append([]cField(nil), fields...)
	swapped[0], swapped[1] = swapped[1], swapped[0]
	retyped := append([]cField(nil), fields...)
	retyped[0].typ = "double"
	for name, f := range map[string][]cField{"swapped": swapped, "retyped": retyped, "missing": fields[1:]} {
		if len(checkMirror(f, typ)) == 0 {
			t.Errorf("%s fields: no difference reported", name)
		}
	}
}
