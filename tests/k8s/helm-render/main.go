// helm-render - renders a Helm chart's templates the way `helm template`
// does, for tests/integration/k8s_manifests.sh on machines without helm
// (Debian has no helm package).  It uses Go's own text/template, the
// engine Helm runs, with the chart's values (values.yaml, then each -f
// file merged over it as `helm -f` merges), the built-in objects Helm
// gives a template (.Values, .Release, .Chart, .Capabilities, .Template)
// and the template functions the chart uses, written here after Helm's
// and Sprig's documented behaviour:
//
//	include, nindent, indent, toYaml, toJson, quote, squote, default,
//	empty, trunc, trimSuffix, trimPrefix, replace, int, upper, lower,
//	required, fail
//
// A function the chart uses that is not in that list fails the parse, so
// the chart cannot quietly outgrow this renderer.  Output: for each file
// of templates/ that renders to something (not _*.tpl, not NOTES.txt),
// "---\n# Source: CHART/templates/FILE\n" and its text, as helm prints.
//
//	helm-render [-f VALUES]... [--name RELEASE] [--namespace NS]
//	            [--api-versions V,...] CHART_DIR
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/template"

	"gopkg.in/yaml.v3"
)

type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

// apiVersions is .Capabilities.APIVersions: Has says whether the cluster
// serves a group/version (or group/version/Kind).
type apiVersions []string

func (a apiVersions) Has(v string) bool {
	for _, x := range a {
		if x == v {
			return true
		}
	}
	return false
}

type capabilities struct {
	APIVersions apiVersions
	KubeVersion struct{ Version, Major, Minor string }
}

func readYAML(path string) (map[string]interface{}, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := map[string]interface{}{}
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	return m, nil
}

// merge puts @over on @base as helm merges a values file: maps merge key
// by key, anything else replaces (null included).
func merge(base, over map[string]interface{}) map[string]interface{} {
	for k, v := range over {
		bm, ok1 := base[k].(map[string]interface{})
		om, ok2 := v.(map[string]interface{})
		if ok1 && ok2 {
			base[k] = merge(bm, om)
		} else {
			base[k] = v
		}
	}
	return base
}

// empty is Sprig's: nil, false, 0, "", and empty collections.
func empty(v interface{}) bool {
	if v == nil {
		return true
	}
	r := reflect.ValueOf(v)
	switch r.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return r.Len() == 0
	case reflect.Bool:
		return !r.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return r.Int() == 0
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return r.Uint() == 0
	case reflect.Float32, reflect.Float64:
		return r.Float() == 0
	case reflect.Ptr, reflect.Interface:
		return r.IsNil()
	}
	return false
}

func str(v interface{}) string {
	switch s := v.(type) {
	case nil:
		return ""
	case string:
		return s
	case []byte:
		return string(s)
	case fmt.Stringer:
		return s.String()
	}
	return fmt.Sprint(v)
}

func toInt(v interface{}) int {
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case uint64:
		return int(n)
	case float64:
		return int(n)
	case string:
		i, err := strconv.ParseInt(strings.TrimSpace(n), 0, 64)
		if err != nil {
			f, ferr := strconv.ParseFloat(strings.TrimSpace(n), 64)
			if ferr != nil {
				return 0
			}
			return int(f)
		}
		return int(i)
	case bool:
		if n {
			return 1
		}
	}
	return 0
}

func indent(n int, s string) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
}

func toYAML(v interface{}) string {
	var b bytes.Buffer
	e := yaml.NewEncoder(&b)
	e.SetIndent(2)
	if err := e.Encode(v); err != nil {
		return ""
	}
	e.Close()
	return strings.TrimSuffix(b.String(), "\n")
}

func quoteAll(q func(string) string, args ...interface{}) string {
	var out []string
	for _, a := range args {
		if a != nil {
			out = append(out, q(str(a)))
		}
	}
	return strings.Join(out, " ")
}

func funcs(t **template.Template) template.FuncMap {
	return template.FuncMap{
		"include": func(name string, data interface{}) (string, error) {
			var b bytes.Buffer
			if err := (*t).ExecuteTemplate(&b, name, data); err != nil {
				return "", err
			}
			return b.String(), nil
		},
		"indent":  indent,
		"nindent": func(n int, s string) string { return "\n" + indent(n, s) },
		"toYaml":  toYAML,
		"toJson": func(v interface{}) string {
			b, err := json.Marshal(v)
			if err != nil {
				return ""
			}
			return string(b)
		},
		"quote": func(args ...interface{}) string {
			return quoteAll(func(s string) string { return strconv.Quote(s) }, args...)
		},
		"squote": func(args ...interface{}) string {
			return quoteAll(func(s string) string { return "'" + s + "'" }, args...)
		},
		"default": func(d interface{}, given ...interface{}) interface{} {
			if len(given) == 0 || empty(given[0]) {
				return d
			}
			return given[0]
		},
		"empty": empty,
		"trunc": func(n int, s string) string {
			if n >= 0 && len(s) > n {
				return s[:n]
			}
			if n < 0 && len(s) > -n {
				return s[len(s)+n:]
			}
			return s
		},
		"trimSuffix": func(suf, s string) string { return strings.TrimSuffix(s, suf) },
		"trimPrefix": func(pre, s string) string { return strings.TrimPrefix(s, pre) },
		"replace":    func(old, new, s string) string { return strings.ReplaceAll(s, old, new) },
		"int":        toInt,
		"upper":      strings.ToUpper,
		"lower":      strings.ToLower,
		"required": func(msg string, v interface{}) (interface{}, error) {
			if v == nil || (reflect.TypeOf(v).Kind() == reflect.String && v.(string) == "") {
				return nil, errors.New(msg)
			}
			return v, nil
		},
		"fail": func(msg string) (string, error) { return "", errors.New(msg) },
	}
}

func main() {
	var vals files
	name := flag.String("name", "cnlab", "release name")
	ns := flag.String("namespace", "default", "release namespace")
	apis := flag.String("api-versions", "", "group/versions the cluster serves, comma-separated")
	flag.Var(&vals, "f", "a values file merged over values.yaml (repeatable)")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: helm-render [-f VALUES]... [--name R] [--namespace NS] [--api-versions V,...] CHART_DIR")
		os.Exit(2)
	}
	dir := flag.Arg(0)
	die := func(err error) {
		fmt.Fprintln(os.Stderr, "helm-render:", err)
		os.Exit(1)
	}
	chart, err := readYAML(filepath.Join(dir, "Chart.yaml"))
	if err != nil {
		die(err)
	}
	values, err := readYAML(filepath.Join(dir, "values.yaml"))
	if err != nil {
		die(err)
	}
	for _, f := range vals {
		over, err := readYAML(f)
		if err != nil {
			die(err)
		}
		values = merge(values, over)
	}
	chartName := str(chart["name"])
	caps := capabilities{APIVersions: apiVersions{"v1", "apps/v1", "rbac.authorization.k8s.io/v1",
		"networking.k8s.io/v1", "admissionregistration.k8s.io/v1", "resource.k8s.io/v1",
		"apiextensions.k8s.io/v1"}}
	caps.KubeVersion.Version, caps.KubeVersion.Major, caps.KubeVersion.Minor = "v1.34.0", "1", "34"
	if *apis != "" {
		caps.APIVersions = append(caps.APIVersions, strings.Split(*apis, ",")...)
	}

	paths, err := filepath.Glob(filepath.Join(dir, "templates", "*"))
	if err != nil {
		die(err)
	}
	sort.Strings(paths)
	var t *template.Template
	t = template.New(chartName).Funcs(funcs(&t)).Option("missingkey=zero")
	var names []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			die(err)
		}
		n := chartName + "/templates/" + filepath.Base(p)
		if _, err := t.New(n).Parse(string(b)); err != nil {
			die(err)
		}
		base := filepath.Base(p)
		if !strings.HasPrefix(base, "_") && base != "NOTES.txt" {
			names = append(names, n)
		}
	}
	for _, n := range names {
		top := map[string]interface{}{
			"Values": values,
			"Release": map[string]interface{}{
				"Name": *name, "Namespace": *ns, "Service": "Helm",
				"IsInstall": true, "IsUpgrade": false, "Revision": 1,
			},
			"Chart": map[string]interface{}{
				"Name": chartName, "Version": str(chart["version"]),
				"AppVersion": str(chart["appVersion"]),
			},
			"Capabilities": caps,
			"Template":     map[string]interface{}{"Name": n, "BasePath": chartName + "/templates"},
		}
		var b bytes.Buffer
		if err := t.ExecuteTemplate(&b, n, top); err != nil {
			die(err)
		}
		// Helm prints a missing value as nothing.
		out := strings.ReplaceAll(b.String(), "<no value>", "")
		if strings.TrimSpace(out) == "" {
			continue
		}
		fmt.Printf("---\n# Source: %s\n%s\n", n, strings.TrimLeft(out, "\n"))
	}
}
