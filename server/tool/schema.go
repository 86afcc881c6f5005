package tool

import (
	"github.com/google/jsonschema-go/jsonschema"
)

// Helpers for the hand-written tool schemas: explicit, and what tools/list shows.

// Object is an object schema with the given properties; unknown properties are refused.
func Object(props map[string]*jsonschema.Schema, required ...string) *jsonschema.Schema {
	return &jsonschema.Schema{
		Type:                 "object",
		Properties:           props,
		Required:             required,
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
	}
}

// String is a string property.
func String(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Description: desc}
}

// Enum is a string property limited to the given values.
func Enum(desc string, values ...string) *jsonschema.Schema {
	e := make([]any, len(values))
	for i, v := range values {
		e[i] = v
	}
	return &jsonschema.Schema{Type: "string", Description: desc, Enum: e}
}

// Integer is an integer property.
func Integer(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "integer", Description: desc}
}

// Boolean is a boolean property.
func Boolean(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "boolean", Description: desc}
}

// AnyJSON accepts any JSON value. It is spelled as one single-type branch per JSON type rather
// than as the empty schema {} (or true), which carries no keyword: the TypeScript and Python
// SDKs reject a bare true in properties, and MCP Inspector --strict flags both.
func AnyJSON(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Description: desc, AnyOf: []*jsonschema.Schema{
		{Type: "object"}, {Type: "array"}, {Type: "string"}, {Type: "number"}, {Type: "boolean"}, {Type: "null"},
	}}
}

// JSONObject is a free-form JSON object.
func JSONObject(desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Description: desc}
}

// Nullable is a value of the given type or null (for output schemas), as anyOf branches of one
// type each: a type array (["string","null"]) does not map onto single-type dialects such as
// the OpenAPI subset of Gemini's function declarations.
func Nullable(typ, desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Description: desc, AnyOf: []*jsonschema.Schema{{Type: typ}, {Type: "null"}}}
}

// Out is an output object schema: listed properties, others allowed.
func Out(props map[string]*jsonschema.Schema, required ...string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Properties: props, Required: required}
}

// ArrayOf is an array of the given items.
func ArrayOf(items *jsonschema.Schema, desc string) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "array", Items: items, Description: desc}
}
