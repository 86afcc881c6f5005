package main

import (
	"context"
	"io"
	"maps"
	"regexp"
	"slices"
	"strings"
)

var numberRE = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?$`)

// switchboard settings → every tunable as one object.
// switchboard settings set KEY VALUE → the same, after the change.
func runSettings(ctx context.Context, c *cli, args []string) error {
	var key, value string
	if len(args) > 0 && args[0] == "set" {
		pos, err := c.parse(c.flags(), args[1:], "KEY", "VALUE")
		if err != nil {
			return err
		}
		key, value = pos[0], pos[1]
		if !numberRE.MatchString(value) {
			return usagef("setting value must be a number, got %q", value)
		}
	} else if _, err := c.parse(c.flags(), args); err != nil {
		return err
	}
	conn, err := c.connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var s map[string]any
	if key == "" {
		s, err = asObject(conn.Settings(ctx))
	} else {
		s, err = asObject(conn.SettingsSet(ctx, key, value))
		if sqlState(err) == "SB400" {
			if known, ok := conn.SettingKeysUnless(ctx, key); ok && len(known) > 0 {
				return usagef("settings set: unknown setting %q; the settings are %s", key, strings.Join(known, ", "))
			}
		}
	}
	if err != nil {
		return err
	}
	return c.emit(s, func(w io.Writer) {
		keys := slices.Sorted(maps.Keys(s))
		rows := make([][]string, 0, len(keys))
		for _, k := range keys {
			rows = append(rows, []string{k, text(s[k])})
		}
		table(w, []string{"KEY", "VALUE"}, rows)
	})
}
