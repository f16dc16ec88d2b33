package scenarios

import (
	"encoding"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/deliverysim/deliverysim/impl/engine"
	"go.yaml.in/yaml/v3"
)

// setting is one engine.Config field a scenario file may give: every field
// with a yaml key. Nothing here names a field: a setting added to
// engine.Config (with its key, default and rule) is decoded, written back,
// validated at its line and handed to the simulator without a change in
// this package.
type setting struct {
	key   string // the yaml key
	name  string // the Go field (engine.ConfigError.Field)
	index int
	typ   reflect.Type
}

var (
	durationType = reflect.TypeOf(time.Duration(0))
	textType     = reflect.TypeOf((*encoding.TextUnmarshaler)(nil)).Elem()
)

var settings = func() []setting {
	t := reflect.TypeOf(engine.Config{})
	var out []setting
	for i := range t.NumField() {
		f := t.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		out = append(out, setting{key: key, name: f.Name, index: i, typ: f.Type})
	}
	return out
}()

// engineKeys are the keys of the engine section.
func engineKeys() []string {
	keys := []string{"bugs"}
	for _, st := range settings {
		keys = append(keys, st.key)
	}
	return keys
}

// full is the engine configuration the section describes (the defaults
// for the zero Engine).
func (e Engine) full() engine.Config {
	if reflect.ValueOf(e.Config).IsZero() {
		return engine.DefaultConfig()
	}
	return e.Config
}

// apply sets c's file-settable fields to the section's (the runtime's
// fields, such as Node, Clock and Rand, stay).
func (e Engine) apply(c *engine.Config) {
	src, dst := reflect.ValueOf(e.full()), reflect.ValueOf(c).Elem()
	for _, st := range settings {
		dst.Field(st.index).Set(src.Field(st.index))
	}
}

// changed lists the settings that differ from engine.DefaultConfig, as
// scalar nodes, in field order.
func (e Engine) changed() ([][2]*yaml.Node, error) {
	cur, def := reflect.ValueOf(e.full()), reflect.ValueOf(engine.DefaultConfig())
	var out [][2]*yaml.Node
	for _, st := range settings {
		v := cur.Field(st.index)
		if v.Equal(def.Field(st.index)) {
			continue
		}
		var text string
		switch {
		case st.typ == durationType:
			text = Duration(v.Int()).String()
		case reflect.PointerTo(st.typ).Implements(textType):
			b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
			if err != nil {
				return nil, fmt.Errorf("engine.%s: %w", st.key, err)
			}
			text = string(b)
		case v.CanInt():
			text = strconv.FormatInt(v.Int(), 10)
		case v.CanFloat():
			text = strconv.FormatFloat(v.Float(), 'g', -1, 64)
		case v.Kind() == reflect.Bool:
			text = strconv.FormatBool(v.Bool())
		default:
			return nil, fmt.Errorf("engine.%s: a %s setting cannot be written to a file", st.key, st.typ)
		}
		out = append(out, [2]*yaml.Node{
			{Kind: yaml.ScalarNode, Value: st.key},
			{Kind: yaml.ScalarNode, Value: text},
		})
	}
	return out, nil
}

// IsZero says the section has nothing to write (yaml omitempty).
func (e Engine) IsZero() bool {
	ch, err := e.changed()
	return err == nil && len(ch) == 0 && len(e.Bugs) == 0
}

// MarshalYAML writes the settings that differ from the defaults, and the
// bugs.
func (e Engine) MarshalYAML() (any, error) {
	ch, err := e.changed()
	if err != nil {
		return nil, err
	}
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, kv := range ch {
		n.Content = append(n.Content, kv[0], kv[1])
	}
	if len(e.Bugs) > 0 {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, b := range e.Bugs {
			seq.Content = append(seq.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: b})
		}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "bugs"}, seq)
	}
	return n, nil
}

// engine decodes the engine section: the defaults, then every setting the
// file gives, each parsed by its Go type.
func (d *decoder) engine(o *object) Engine {
	e := Engine{Config: engine.DefaultConfig(), lines: map[string]int{"": o.line()}}
	cfg := reflect.ValueOf(&e.Config).Elem()
	for _, st := range settings {
		node := o.scalar(st.key)
		if node == nil {
			continue
		}
		e.lines[st.key] = node.Line
		f := cfg.Field(st.index)
		switch {
		case st.typ == durationType:
			f.SetInt(int64(o.duration(st.key, false, false)))
		case reflect.PointerTo(st.typ).Implements(textType):
			if err := f.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(node.Value)); err != nil {
				d.fail(node, join(o.path, st.key), "%v", err)
			}
		case f.CanInt():
			f.SetInt(o.integer(st.key, -1<<30, 1<<30))
		case f.CanFloat():
			if v := o.float(st.key); v != nil {
				f.SetFloat(*v)
			}
		case f.Kind() == reflect.Bool:
			f.SetBool(o.boolean(st.key))
		default:
			d.fail(node, join(o.path, st.key), "a %s setting cannot be read from a file", st.typ)
		}
	}
	e.Bugs = o.strings("bugs")
	if v, ok := o.keys["bugs"]; ok {
		e.BugsLine = v.Line
	}
	return e
}

// configError places an engine.Config.Validate error at the key of the
// field it is about (or at the engine section, for a key the file left
// out).
func (e Engine) configError(err error) error {
	var ce *engine.ConfigError
	if !errors.As(err, &ce) {
		return lineErr(e.lines[""], "engine", "%v", strings.TrimPrefix(err.Error(), "engine config: "))
	}
	for _, st := range settings {
		if st.name == ce.Field {
			line, ok := e.lines[st.key]
			if !ok {
				line = e.lines[""]
			}
			return lineErr(line, "engine."+st.key, "%s", ce.Msg)
		}
	}
	return lineErr(e.lines[""], "engine", "%s", ce.Msg)
}
