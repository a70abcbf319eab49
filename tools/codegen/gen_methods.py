#!/usr/bin/env python3
"""Generate crates/codec/src/generated.rs from the AMQP 0-9-1 spec XML with RabbitMQ's extensions.

The XML is Debian's amqp-specs file 0-9-1-rabbit/amqp0-9-1.stripped.extended.xml, vendored next
to this script so the output is reproducible. Run with no arguments to rewrite the file, or with
--check to fail when the checked-in output is stale (test.sh does this).
"""
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEC = HERE / "amqp0-9-1.stripped.extended.xml"
OUT = HERE.parent.parent / "crates" / "codec" / "src" / "generated.rs"

RUST_TYPES = {
    "octet": "u8",
    "short": "u16",
    "long": "u32",
    "longlong": "u64",
    "bit": "bool",
    "shortstr": "ShortStr",
    "longstr": "LongStr",
    "timestamp": "u64",
    "table": "FieldTable",
}
RENAMES = {"type": "exchange_type"}

# The Reader/Writer method for each AMQP type (timestamps are 64-bit integers on the wire).
WIRE_METHOD = {
    "octet": "octet", "short": "short", "long": "long", "longlong": "longlong",
    "shortstr": "shortstr", "longstr": "longstr", "timestamp": "longlong", "table": "table",
}
# Types passed to the Writer by reference rather than by value.
BY_REFERENCE = {"shortstr", "longstr", "table"}


def write_call(t, value, value_is_ref=False):
    """`w.<method>(<arg>)` writing `value` of AMQP type t (a place, or a reference to one)."""
    if t in BY_REFERENCE:
        arg = value if value_is_ref else f"&{value}"
    else:
        arg = f"*{value}" if value_is_ref else value
    return f"w.{WIRE_METHOD[t]}({arg})"


def pascal(name):
    return "".join(part.capitalize() for part in name.split("-"))


def snake(name):
    name = name.replace("-", "_")
    return RENAMES.get(name, name)


def load():
    root = ET.parse(SPEC).getroot()
    domains = {d.get("name"): d.get("type") for d in root.findall("domain")}
    constants = [(c.get("name"), int(c.get("value")), c.get("class")) for c in root.findall("constant")]
    # RabbitMQ returns unroutable mandatory messages with 312 NO_ROUTE, a code the 0-9-1 XML
    # dropped (it was in 0-9); RabbitMQ's own framing keeps it.
    constants.append(("no-route", 312, "soft-error"))
    constants.sort(key=lambda c: c[1])
    # RabbitMQ extensions its clients use that this XML file lacks (they are in RabbitMQ's
    # own codegen input): connection.blocked/unblocked and connection.update-secret(-ok).
    connection = [c for c in root.findall("class") if c.get("name") == "connection"][0]
    for name, index, fields in (
        ("blocked", "60", [("reason", "shortstr")]),
        ("unblocked", "61", []),
        ("update-secret", "70", [("new-secret", "longstr"), ("reason", "shortstr")]),
        ("update-secret-ok", "71", []),
    ):
        method = ET.SubElement(connection, "method", {"name": name, "index": index})
        for fname, ftype in fields:
            ET.SubElement(method, "field", {"name": fname, "domain": ftype})
    classes = []
    for cls in root.findall("class"):
        methods = []
        for m in cls.findall("method"):
            fields = []
            for f in m.findall("field"):
                amqp_type = f.get("type") or domains[f.get("domain")]
                fields.append((snake(f.get("name")), amqp_type, f.get("reserved") == "1"))
            methods.append((m.get("name"), int(m.get("index")), m.get("content") == "1", fields))
        props = []
        for f in cls.findall("field"):
            # The `type` property names the message's type; `type` is a Rust keyword.
            name = "message_type" if f.get("name") == "type" else snake(f.get("name"))
            props.append((name, f.get("type") or domains[f.get("domain")]))
        classes.append((cls.get("name"), int(cls.get("index")), methods, props))
    return constants, classes


def gen_decode_fields(out, fields, indent):
    """Emit decoding statements; consecutive bits share one octet (spec 4.2.5.2)."""
    bit_index = None
    for name, t, reserved in fields:
        target = "_" if reserved else name
        if t == "bit":
            if bit_index is None or bit_index == 8:
                out.append(f"{indent}let bits = r.octet()?;")
                bit_index = 0
            out.append(f"{indent}let {target} = bits & (1 << {bit_index}) != 0;")
            bit_index += 1
            continue
        bit_index = None
        out.append(f"{indent}let {target} = r.{WIRE_METHOD[t]}()?;")


def gen_encode_fields(out, fields, indent):
    bits = []

    def flush():
        if bits:
            expr = " | ".join(f"(u8::from({b}) << {i})" for i, b in enumerate(bits))
            out.append(f"{indent}w.octet({expr});")
            bits.clear()

    for name, t, reserved in fields:
        if t == "bit":
            if len(bits) == 8:
                flush()
            bits.append("false" if reserved else f"self.{name}")
            continue
        flush()
        if reserved:
            value = {"short": "w.short(0)", "shortstr": "w.shortstr(\"\")",
                     "longstr": "w.longstr(b\"\")", "octet": "w.octet(0)",
                     "long": "w.long(0)"}[t]
            out.append(f"{indent}{value};")
            continue
        out.append(f"{indent}{write_call(t, 'self.' + name)};")
    flush()


def generate():
    constants, classes = load()
    o = []
    o.append("// @generated by tools/codegen/gen_methods.py from amqp0-9-1.stripped.extended.xml.")
    o.append("// DO NOT EDIT: change the generator and run `python3 tools/codegen/gen_methods.py`.")
    o.append("//! Every AMQP 0-9-1 method (with RabbitMQ's extensions) as a struct, the `Method` enum over")
    o.append("//! them, the basic content-header properties and the spec's reply codes.")
    o.append("#![allow(clippy::all, unused_parens)]")
    o.append("")
    o.append("use crate::reader::Reader;")
    o.append("use crate::writer::Writer;")
    o.append("use crate::{CodecError, FieldTable, LongStr, ShortStr};")
    o.append("")
    o.append("/// Reply codes from the spec's constants (`soft-error` ones close a channel, `hard-error` ones")
    o.append("/// the connection).")
    o.append("#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]")
    o.append("#[repr(u16)]")
    o.append("pub enum ReplyCode {")
    codes = [(n, v, c) for n, v, c in constants if v >= 200 and not n.startswith("frame-")
             or n == "frame-error"]
    for n, v, c in codes:
        o.append(f"    {pascal(n)} = {v},")
    o.append("}")
    o.append("")
    o.append("impl ReplyCode {")
    o.append("    /// The spec's name for the code, as RabbitMQ puts it in reply texts (`NOT_FOUND`).")
    o.append("    pub fn name(self) -> &'static str {")
    o.append("        match self {")
    for n, v, c in codes:
        o.append(f"            ReplyCode::{pascal(n)} => \"{n.upper().replace('-', '_')}\",")
    o.append("        }")
    o.append("    }")
    o.append("")
    o.append("    /// True when the spec classes this code as a connection (hard) error.")
    o.append("    pub fn is_hard_error(self) -> bool {")
    hard = [pascal(n) for n, v, c in codes if c == "hard-error"]
    o.append("        matches!(self, " + " | ".join(f"ReplyCode::{h}" for h in hard) + ")")
    o.append("    }")
    o.append("}")
    o.append("")

    # Method structs.
    for cname, cidx, methods, _ in classes:
        for mname, midx, content, fields in methods:
            sname = pascal(cname) + pascal(mname)
            o.append(f"/// `{cname}.{mname}` (class {cidx}, method {midx}){' — carries content' if content else ''}.")
            o.append("#[derive(Debug, Clone, PartialEq, Default)]")
            real = [(n, t) for n, t, r in fields if not r]
            if not real:
                o.append(f"pub struct {sname};")
            else:
                o.append(f"pub struct {sname} {{")
                for n, t in real:
                    o.append(f"    pub {n}: {RUST_TYPES[t]},")
                o.append("}")
            o.append("")
            o.append(f"impl {sname} {{")
            o.append(f"    pub const CLASS_ID: u16 = {cidx};")
            o.append(f"    pub const METHOD_ID: u16 = {midx};")
            o.append("")
            o.append("    fn decode_args(r: &mut Reader) -> Result<Self, CodecError> {")
            gen_decode_fields(o, fields, "        ")
            if not real:
                o.append("        let _ = r;")
                o.append(f"        Ok({sname})")
            else:
                o.append(f"        Ok({sname} {{ " + ", ".join(n for n, _ in real) + " })")
            o.append("    }")
            o.append("")
            o.append("    fn encode_args(&self, w: &mut Writer) {")
            gen_encode_fields(o, fields, "        ")
            if not fields:
                o.append("        let _ = w;")
            o.append("    }")
            o.append("}")
            o.append("")

    all_methods = [(cname, cidx, mname, midx, content) for cname, cidx, methods, _ in classes
                   for mname, midx, content, _ in methods]
    o.append("/// Any AMQP method frame's payload, decoded.")
    o.append("#[derive(Debug, Clone, PartialEq)]")
    o.append("pub enum Method {")
    for cname, cidx, mname, midx, content in all_methods:
        s = pascal(cname) + pascal(mname)
        o.append(f"    {s}({s}),")
    o.append("}")
    o.append("")
    o.append("impl Method {")
    o.append("    /// Decodes a method frame payload: class id, method id, then the arguments.")
    o.append("    pub fn decode(r: &mut Reader) -> Result<Method, CodecError> {")
    o.append("        let class_id = r.short()?;")
    o.append("        let method_id = r.short()?;")
    o.append("        Ok(match (class_id, method_id) {")
    for cname, cidx, mname, midx, content in all_methods:
        s = pascal(cname) + pascal(mname)
        o.append(f"            ({cidx}, {midx}) => Method::{s}({s}::decode_args(r)?),")
    o.append("            _ => return Err(CodecError::UnknownMethod { class_id, method_id }),")
    o.append("        })")
    o.append("    }")
    o.append("")
    o.append("    /// Encodes class id, method id and arguments.")
    o.append("    pub fn encode(&self, w: &mut Writer) {")
    o.append("        w.short(self.class_id());")
    o.append("        w.short(self.method_id());")
    o.append("        match self {")
    for cname, cidx, mname, midx, content in all_methods:
        s = pascal(cname) + pascal(mname)
        o.append(f"            Method::{s}(m) => m.encode_args(w),")
    o.append("        }")
    o.append("    }")
    o.append("")
    for fn, idx in (("class_id", 1), ("method_id", 3)):
        o.append(f"    pub fn {fn}(&self) -> u16 {{")
        o.append("        match self {")
        for cname, cidx, mname, midx, content in all_methods:
            s = pascal(cname) + pascal(mname)
            o.append(f"            Method::{s}(_) => {cidx if idx == 1 else midx},")
        o.append("        }")
        o.append("    }")
        o.append("")
    o.append("    /// True for methods followed by a content header and body frames.")
    o.append("    pub fn has_content(&self) -> bool {")
    content_methods = [pascal(c) + pascal(m) for c, _, m, _, ct in all_methods if ct]
    o.append("        matches!(self, " + " | ".join(f"Method::{s}(_)" for s in content_methods) + ")")
    o.append("    }")
    o.append("")
    o.append("    /// The spec's dotted name, e.g. `basic.publish`, for logs and error texts.")
    o.append("    pub fn name(&self) -> &'static str {")
    o.append("        method_name(self.class_id(), self.method_id())")
    o.append("    }")
    o.append("}")
    o.append("")
    o.append("/// The dotted name of a (class, method) pair, `unknown` when the spec has none.")
    o.append("pub fn method_name(class_id: u16, method_id: u16) -> &'static str {")
    o.append("    match (class_id, method_id) {")
    for cname, cidx, mname, midx, content in all_methods:
        o.append(f"        ({cidx}, {midx}) => \"{cname}.{mname}\",")
    o.append("        _ => \"unknown\",")
    o.append("    }")
    o.append("}")
    o.append("")
    for cname, cidx, mname, midx, content in all_methods:
        s = pascal(cname) + pascal(mname)
        o.append(f"impl From<{s}> for Method {{")
        o.append(f"    fn from(m: {s}) -> Method {{")
        o.append(f"        Method::{s}(m)")
        o.append("    }")
        o.append("}")
        o.append("")

    # Basic content-header properties.
    basic = [c for c in classes if c[0] == "basic"][0]
    props = basic[3]
    o.append("/// The basic class's content-header properties; `None` means the flag bit is clear.")
    o.append("#[derive(Debug, Clone, PartialEq, Default)]")
    o.append("pub struct BasicProperties {")
    for n, t in props:
        o.append(f"    pub {n}: Option<{RUST_TYPES[t]}>,")
    o.append("}")
    o.append("")
    o.append("impl BasicProperties {")
    o.append("    /// Decodes the property flags and the present properties (after class, weight, size).")
    o.append("    pub fn decode(r: &mut Reader) -> Result<BasicProperties, CodecError> {")
    o.append("        let flags = r.short()?;")
    o.append("        if flags & 1 != 0 {")
    o.append("            // A continuation flag word: the basic class has fewer than 15 properties.")
    o.append("            return Err(CodecError::Syntax(\"property flags continuation\"));")
    o.append("        }")
    o.append("        let mut p = BasicProperties::default();")
    for i, (n, t) in enumerate(props):
        o.append(f"        if flags & (1 << {15 - i}) != 0 {{")
        o.append(f"            p.{n} = Some(r.{WIRE_METHOD[t]}()?);")
        o.append("        }")
    o.append("        Ok(p)")
    o.append("    }")
    o.append("")
    o.append("    /// Encodes the property flags and the present properties.")
    o.append("    pub fn encode(&self, w: &mut Writer) {")
    o.append("        let mut flags = 0u16;")
    for i, (n, t) in enumerate(props):
        o.append(f"        if self.{n}.is_some() {{")
        o.append(f"            flags |= 1 << {15 - i};")
        o.append("        }")
    o.append("        w.short(flags);")
    for i, (n, t) in enumerate(props):
        o.append(f"        if let Some(v) = &self.{n} {{")
        o.append(f"            {write_call(t, 'v', value_is_ref=True)};")
        o.append("        }")
    o.append("    }")
    o.append("}")
    o.append("")
    return "\n".join(o)


def main():
    text = generate()
    if "--check" in sys.argv:
        current = OUT.read_text() if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is stale: run python3 tools/codegen/gen_methods.py", file=sys.stderr)
            sys.exit(1)
        return
    OUT.write_text(text)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
