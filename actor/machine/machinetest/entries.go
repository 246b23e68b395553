package machinetest

import "github.com/tether-dev/tether/wal/record"

// MetaString is e's metadata value under key, if it is a string ("" if
// not).
func MetaString(e record.Entry, key string) string {
	s, _ := e.Metadata[key].(string)
	return s
}

// Uint reads an integer the way msgpack may have decoded it (any width,
// signed or not); 0 for anything else.
func Uint(v any) uint64 {
	switch v := v.(type) {
	case uint64:
		return v
	case uint32:
		return uint64(v)
	case uint16:
		return uint64(v)
	case uint8:
		return uint64(v)
	case int64:
		return uint64(v)
	case int32:
		return uint64(v)
	case int16:
		return uint64(v)
	case int8:
		return uint64(v)
	case int:
		return uint64(v)
	}
	return 0
}
