//! `kubernetes_file`: Kubernetes and Kueue objects as kubectl writes them (see docs/accounting.md,
//! "Capture directories"): JSON `List`s, single objects, watch-event streams (concatenated
//! JSON values, pretty or one per line) and multi-document YAML.
//!
//! The reader only finds object versions, their event type and their observation time; what a
//! kind means is decided by [`crate::tables::k8s`]. A broken value costs that value: JSON streams
//! resume at the next line that opens an object, YAML files are cut into documents first so a bad
//! document does not hide its neighbours.

use std::path::Path;

use serde_json::{Map, Value};

use crate::diag::{Diagnostics, Position};
use crate::object::{ObjectVersion, parse_time_ms};
use crate::sources::{Loaded, Origin, Source};
use crate::tables::k8s::K8sTables;

pub use gpuledger_schemas::EventType;

/// Reads every object version in `bytes` (the content of `path`). `fallback_ms` is the time used
/// for an object that records no time of its own (the file's modification time).
pub fn read_objects(path: &Path, bytes: &[u8], fallback_ms: i64, diags: &mut Diagnostics) -> Vec<ObjectVersion> {
    let mut out = Vec::new();
    let mut emit = |v: ObjectVersion, _: &mut Diagnostics| out.push(v);
    let mut reader = Reader::new(path, fallback_ms, &mut emit);
    match format_of(path, bytes) {
        Format::Json => {
            // Reading a slice cannot fail.
            let _ = read_json_stream(&mut std::io::Cursor::new(bytes), bytes.len().max(1), usize::MAX, &mut reader, diags);
        }
        Format::Yaml => read_yaml_documents(bytes, &mut reader, diags),
    }
    reader.finish(diags);
    out
}

/// Whether [`stream_objects`] can read a file: JSON (by its extension, else by `head`, its first
/// bytes), which is read a window at a time. YAML is read whole.
pub fn is_json(path: &Path, head: &[u8]) -> bool {
    matches!(format_of(path, head), Format::Json)
}

/// Bytes a JSON stream is read ahead by. A value longer than the window grows it, so memory
/// follows the largest value, not the file; but see [`LARGE_VALUE`].
pub const STREAM_WINDOW: usize = 1 << 20;

/// A value at least this long that is a `List` is read an item at a time rather than whole
/// (`kubectl get events -o json` of a busy month is one value of half a gigabyte; parsed whole it
/// took 2.5 GiB). No single Kubernetes object comes near it: the API server stores at most
/// 1.5 MiB per object.
pub const LARGE_VALUE: usize = 8 << 20;

/// What [`stream_objects`] reads: a file, which a large List is read from twice (see
/// [`LARGE_VALUE`]).
pub trait ReadSeek: std::io::Read + std::io::Seek {}

impl<T: std::io::Read + std::io::Seek> ReadSeek for T {}

/// Reads the JSON values of `input` (the content of `path`, see [`is_json`]) a window at a
/// time, handing each object version to `emit` in stream order, so that a watch stream larger
/// than memory is read in memory of the order of its largest object. The versions, their
/// times and the diagnostics are those [`read_objects`] finds in the whole file. Fails only when
/// `input` does: what was read before stays emitted.
pub fn stream_objects(
    path: &Path,
    input: &mut dyn ReadSeek,
    fallback_ms: i64,
    diags: &mut Diagnostics,
    emit: &mut dyn FnMut(ObjectVersion, &mut Diagnostics),
) -> std::io::Result<()> {
    let mut reader = Reader::new(path, fallback_ms, emit);
    let read = read_json_stream(input, STREAM_WINDOW, LARGE_VALUE, &mut reader, diags);
    reader.finish(diags);
    read.map(|_| ())
}

/// `kubernetes_file`: the [`Source`] over [`read_objects`]; objects without a time of their
/// own take the file's modification time (0 when unknown).
#[derive(Debug, Default, Clone, Copy)]
pub struct KubernetesFile;

impl Source for KubernetesFile {
    type Records = Vec<ObjectVersion>;
    type Tables = K8sTables;

    fn name(&self) -> &'static str {
        "kubernetes_file"
    }

    fn parse(&mut self, bytes: &[u8], origin: &Origin<'_>, diags: &mut Diagnostics) -> Vec<ObjectVersion> {
        read_objects(origin.path, bytes, origin.modified_ms.unwrap_or(0), diags)
    }

    fn load(&mut self, records: Vec<ObjectVersion>, tables: &mut K8sTables, origin: &Origin<'_>, diags: &mut Diagnostics) -> Loaded {
        let before = tables.kinds.clone();
        for v in &records {
            tables.push(origin.path, v, diags);
        }
        let objects = tables.kinds_since(&before);
        Loaded { objects, ..Loaded::default() }
    }
}

/// One object version received from an API server watch or list (the live collector), with
/// the same observation time rule as a watch stream read from a file: the latest time the object
/// records, never earlier than `last_ms` (the stream's previous version, updated here); `now_ms`
/// when the object records no time.
pub fn received_version(mut object: Value, event_type: EventType, now_ms: i64, last_ms: &mut Option<i64>, seq: i64) -> ObjectVersion {
    if let Some(Value::Object(meta)) = object.get_mut("metadata") {
        meta.remove("managedFields");
    }
    let recorded = match &object {
        Value::Object(map) => recorded_time_ms(map),
        _ => None,
    };
    let mut observed = recorded.unwrap_or(now_ms);
    if let Some(prev) = *last_ms {
        observed = observed.max(prev);
    }
    *last_ms = Some(observed);
    ObjectVersion { observed_at_ms: observed, seq, event_type, object }
}

const BOM: &[u8] = b"\xEF\xBB\xBF";

enum Format {
    Json,
    Yaml,
}

/// The extension decides; anything else is sniffed (JSON starts with `{` or `[`).
fn format_of(path: &Path, bytes: &[u8]) -> Format {
    let ext = path.extension().and_then(|e| e.to_str()).map(|e| e.to_ascii_lowercase());
    match ext.as_deref() {
        Some("json" | "jsonl" | "ndjson") => Format::Json,
        Some("yaml" | "yml") => Format::Yaml,
        _ => match bytes.strip_prefix(BOM).unwrap_or(bytes).iter().find(|b| !b.is_ascii_whitespace()) {
            Some(b'{' | b'[') => Format::Json,
            _ => Format::Yaml,
        },
    }
}

/// State shared by every value of one file.
struct Reader<'a> {
    path: &'a Path,
    fallback_ms: i64,
    /// Takes each object version found.
    emit: &'a mut dyn FnMut(ObjectVersion, &mut Diagnostics),
    /// Versions emitted so far (the next one's `seq`).
    emitted: i64,
    /// Observation time of the last watch event, so that a stream never goes back in time.
    last_watch_ms: Option<i64>,
    /// Versions that took `fallback_ms`.
    untimed: u64,
}

impl<'a> Reader<'a> {
    fn new(path: &'a Path, fallback_ms: i64, emit: &'a mut dyn FnMut(ObjectVersion, &mut Diagnostics)) -> Self {
        Reader { path, fallback_ms, emit, emitted: 0, last_watch_ms: None, untimed: 0 }
    }

    /// One warning for all the versions that had no time of their own.
    fn finish(self, diags: &mut Diagnostics) {
        if self.untimed > 0 {
            diags.warn(
                self.path,
                Position::File,
                "time_from_mtime",
                format!(
                    "{} object version(s) record no time of their own; the file's modification time was used as their observation time",
                    self.untimed
                ),
            );
        }
    }
}

impl Reader<'_> {
    /// One top-level JSON value or YAML document: a List, a watch event or a plain object.
    fn value(&mut self, value: Value, at: Position, diags: &mut Diagnostics) {
        let Value::Object(mut map) = value else {
            let what = describe(&value);
            diags.error(
                self.path,
                at,
                "not_an_object",
                format!("expected a Kubernetes object, a List or a watch event, found {what}"),
            );
            return;
        };
        if is_watch_event(&map) {
            self.watch_event(map, at, diags);
            return;
        }
        let kind = map.get("kind").and_then(Value::as_str).unwrap_or_default().to_owned();
        if kind == "List" || (kind.ends_with("List") && map.get("items").is_some_and(Value::is_array)) {
            let api_version = map.get("apiVersion").and_then(Value::as_str).map(str::to_owned);
            let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty()).map(str::to_owned);
            let list = ListOf { kind, item_kind, api_version };
            let items = match map.remove("items") {
                Some(Value::Array(items)) => items,
                _ => Vec::new(),
            };
            for (i, item) in items.into_iter().enumerate() {
                self.list_item(&list, i, item, &at, diags);
            }
            return;
        }
        self.object(map, EventType::Snapshot, false, &at, "", diags);
    }

    /// Item `i` of a List (at `at`): an object, with the List's kind and apiVersion where it
    /// has none of its own.
    fn list_item(&mut self, list: &ListOf, i: usize, item: Value, at: &Position, diags: &mut Diagnostics) {
        let kind = &list.kind;
        let Value::Object(mut obj) = item else {
            let what = describe(&item);
            diags.error(self.path, at.clone(), "not_an_object", format!("item {i} of the {kind} is {what}, not an object"));
            return;
        };
        if !obj.contains_key("kind")
            && let Some(k) = &list.item_kind
        {
            obj.insert("kind".into(), Value::String(k.clone()));
        }
        if !obj.contains_key("apiVersion")
            && let Some(a) = &list.api_version
        {
            obj.insert("apiVersion".into(), Value::String(a.clone()));
        }
        self.object(obj, EventType::Snapshot, false, at, &format!("item {i} of the {kind}: "), diags);
    }

    fn watch_event(&mut self, mut map: Map<String, Value>, at: Position, diags: &mut Diagnostics) {
        let event_type = map.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
        let object = map.remove("object");
        match event_type.as_str() {
            "ADDED" | "MODIFIED" | "DELETED" => match (object, EventType::parse(&event_type)) {
                (Some(Value::Object(obj)), Some(t)) => self.object(obj, t, true, &at, "", diags),
                (other, _) => {
                    let what = other.as_ref().map_or("nothing", describe);
                    diags.error(
                        self.path,
                        at,
                        "not_an_object",
                        format!("{event_type} watch event holds {what}, not an object"),
                    );
                }
            },
            "BOOKMARK" => diags.skip("watch_bookmark", 1),
            "ERROR" => {
                // The object of an ERROR event is a Status, e.g. 410 Gone after a compaction.
                let status = object.unwrap_or(Value::Null);
                let field = |k: &str| status.get(k).map(|v| v.as_str().map_or_else(|| v.to_string(), str::to_owned));
                let reason = field("reason").unwrap_or_else(|| "no reason".into());
                let code = field("code").unwrap_or_else(|| "no code".into());
                let message = field("message").unwrap_or_default();
                diags.error(
                    self.path,
                    at,
                    "watch_error",
                    format!("watch ERROR event: {reason} ({code}): {message}"),
                );
            }
            other => {
                let shown = if other.is_empty() {
                    map.get("type").map_or_else(String::new, Value::to_string)
                } else {
                    other.to_owned()
                };
                diags.error(
                    self.path,
                    at,
                    "unknown_watch_type",
                    format!("watch event type {shown:?} is none of ADDED, MODIFIED, DELETED, BOOKMARK, ERROR"),
                );
            }
        }
    }

    /// Emits one version of a plain object (after the List / watch envelope is taken off).
    fn object(
        &mut self,
        mut obj: Map<String, Value>,
        event_type: EventType,
        watch: bool,
        at: &Position,
        context: &str,
        diags: &mut Diagnostics,
    ) {
        let kind = obj.get("kind").and_then(Value::as_str);
        let api_version = obj.get("apiVersion").and_then(Value::as_str);
        let (Some(kind), Some(_)) = (kind, api_version) else {
            let missing = match (kind, api_version) {
                (None, None) => "kind and apiVersion",
                (None, Some(_)) => "kind",
                _ => "apiVersion",
            };
            diags.error(
                self.path,
                at.clone(),
                "not_an_object",
                format!("{context}object has no {missing}, so it is not a Kubernetes object"),
            );
            return;
        };
        let name = obj.get("metadata").and_then(|m| m.get("name")).and_then(Value::as_str);
        if name.is_none_or(str::is_empty) {
            diags.error(
                self.path,
                at.clone(),
                "missing_name",
                format!("{context}{kind} has no metadata.name"),
            );
            return;
        }
        if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
            meta.remove("managedFields");
        }
        let mut observed = match recorded_time_ms(&obj) {
            Some(t) => t,
            None => {
                self.untimed += 1;
                self.fallback_ms
            }
        };
        if watch {
            if let Some(prev) = self.last_watch_ms {
                observed = observed.max(prev);
            }
            self.last_watch_ms = Some(observed);
        }
        let version = ObjectVersion {
            observed_at_ms: observed,
            seq: self.emitted,
            event_type,
            object: Value::Object(obj),
        };
        self.emitted += 1;
        (self.emit)(version, diags);
    }
}

/// What a List's items take from it.
struct ListOf {
    kind: String,
    /// A typed list (PodList) may leave apiVersion/kind off its items.
    item_kind: Option<String>,
    api_version: Option<String>,
}

/// `{"type": ..., "object": ...}` without a kind of its own (a core Event has `type` but no `object`).
fn is_watch_event(map: &Map<String, Value>) -> bool {
    map.contains_key("type") && map.contains_key("object") && !map.contains_key("kind")
}

fn describe(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The latest time the object records about itself, if any (see the `observed_at` column).
fn recorded_time_ms(obj: &Map<String, Value>) -> Option<i64> {
    let mut latest = None;
    let mut consider = |v: Option<&Value>| {
        if let Some(t) = v.and_then(Value::as_str).and_then(parse_time_ms) {
            latest = Some(latest.map_or(t, |l: i64| l.max(t)));
        }
    };
    if obj.get("kind").and_then(Value::as_str) == Some("Event") {
        // An Event's own times say when it happened; its other fields describe something else.
        for key in [
            "eventTime",
            "firstTimestamp",
            "lastTimestamp",
            "deprecatedFirstTimestamp",
            "deprecatedLastTimestamp",
        ] {
            consider(obj.get(key));
        }
        consider(obj.get("series").and_then(|s| s.get("lastObservedTime")));
        consider(obj.get("metadata").and_then(|m| m.get("creationTimestamp")));
        return latest;
    }
    for part in ["metadata", "status"] {
        if let Some(v) = obj.get(part) {
            walk_times(v, &mut latest);
        }
    }
    latest
}

/// Keys that name a past moment. `requeueAt` is when Kueue will retry: a future time.
fn is_time_key(k: &str) -> bool {
    k != "requeueAt" && (k.ends_with("Timestamp") || k.ends_with("Time") || k.ends_with("At"))
}

fn walk_times(v: &Value, latest: &mut Option<i64>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                match child {
                    Value::String(s) if is_time_key(k) => {
                        if let Some(t) = parse_time_ms(s) {
                            *latest = Some(latest.map_or(t, |l| l.max(t)));
                        }
                    }
                    _ => walk_times(child, latest),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|i| walk_times(i, latest)),
        _ => {}
    }
}

/// Zero or more concatenated JSON values, pretty-printed or one per line, read from `input`
/// `window` bytes at a time (see [`Window`]). A List of `large` bytes or more is read an item
/// at a time ([`stream_list`]).
fn read_json_stream(input: &mut dyn ReadSeek, window: usize, large: usize, reader: &mut Reader<'_>, diags: &mut Diagnostics) -> std::io::Result<usize> {
    let mut w = Window::new(input, window);
    // The start of the last large value found not to be a List: it is read whole.
    let mut not_a_list: Option<u64> = None;
    while w.buf.len() < BOM.len() && !w.eof {
        w.read_more()?;
    }
    // A byte-order mark is skipped, not stripped, so that offsets stay those of the file.
    let mut pos = if w.buf.starts_with(BOM) { BOM.len() } else { 0 };
    loop {
        pos = skip_whitespace(&w.buf, pos);
        if pos == w.buf.len() {
            if w.eof {
                break;
            }
            pos = w.refill(pos)?;
            continue;
        }
        let start_line = w.line_at(pos);
        let at = Position::Byte {
            offset: w.offset(pos),
            line: start_line,
        };
        let rest = w.buf.get(pos..).unwrap_or_default();
        let mut stream = serde_json::Deserializer::from_slice(rest).into_iter::<Value>();
        match stream.next() {
            None => break,
            Some(Ok(value)) => {
                let end = pos + stream.byte_offset();
                // A value that ends with the window may go on past it (a number: `12|34`).
                if end == w.buf.len() && !w.eof {
                    pos = w.refill(pos)?;
                    continue;
                }
                reader.value(value, at, diags);
                if end <= pos {
                    break;
                }
                pos = end;
            }
            Some(Err(e)) => {
                let err_at = pos + offset_in(rest, e.line(), e.column());
                // A value the window cuts short is an EOF error (serde_json says so for every
                // cut the tests make); a syntax error this close to the window's end is parsed
                // again in a longer window all the same, in case one is not: it costs only time.
                if !w.eof && (e.is_eof() || err_at + 64 >= w.buf.len()) {
                    if w.buf.len() - pos >= large && w.buf.get(pos) == Some(&b'{') && not_a_list != Some(w.offset(pos)) {
                        if stream_list(&mut w, pos, at.clone(), reader, diags)? {
                            pos = 0;
                        } else {
                            not_a_list = Some(w.offset(pos));
                        }
                        continue;
                    }
                    pos = w.refill(pos)?;
                    continue;
                }
                if e.is_eof() {
                    diags.error(
                        reader.path,
                        at,
                        "truncated_json",
                        format!("the stream ends inside the value that starts here ({})", without_position(&e)),
                    );
                    break;
                }
                diags.error(
                    reader.path,
                    Position::Byte {
                        offset: w.offset(err_at),
                        line: w.line_at(err_at),
                    },
                    "invalid_json",
                    format!("{} (in the value starting at line {start_line})", without_position(&e)),
                );
                match resume(&mut w, err_at, pos)? {
                    Some(next) => pos = next,
                    None => break,
                }
            }
        }
    }
    Ok(w.most)
}

/// Reads the value at `buf[pos]`, if it is a List that parses, an item at a time straight from
/// the input, and moves the window past it (returns `true`). Two passes: the first reads the
/// List's own fields without keeping its items (its `kind` comes after `items` in kubectl's
/// output, and decides what the items are); the second hands each item on as it is parsed.
/// Anything else (`false`) is left for the window to read whole, with the errors it finds.
fn stream_list(w: &mut Window<'_>, pos: usize, at: Position, reader: &mut Reader<'_>, diags: &mut Diagnostics) -> std::io::Result<bool> {
    use serde::de::DeserializeSeed;
    use std::io::SeekFrom;
    let start = w.offset(pos);
    w.input.seek(SeekFrom::Start(start))?;
    let mut tally = Tally { inner: std::io::BufReader::with_capacity(1 << 16, &mut *w.input), bytes: 0, newlines: 0 };
    let head = <ListHead as serde::Deserialize>::deserialize(&mut serde_json::Deserializer::from_reader(&mut tally));
    let (bytes, newlines) = (tally.bytes, tally.newlines);
    let list = match head {
        Ok(h) if !h.is_watch_event() && h.items_arrays == 1 && (h.kind() == "List" || h.kind().ends_with("List")) => h.list_of(),
        // Not a List, or one the window reads (and reports) as it would any broken value.
        _ => {
            w.input.seek(SeekFrom::Start(w.offset(w.buf.len())))?;
            return Ok(false);
        }
    };
    w.input.seek(SeekFrom::Start(start))?;
    let mut de = serde_json::Deserializer::from_reader(std::io::BufReader::with_capacity(1 << 16, &mut *w.input));
    let items = ListItems { list: &list, reader, diags, at: &at };
    if let Err(e) = items.deserialize(&mut de) {
        // The first pass parsed the same bytes: only reading can fail now.
        return Err(e.io_error_kind().map_or_else(|| std::io::Error::other(e.to_string()), |k| std::io::Error::new(k, e.to_string())));
    }
    // The window goes on after the List, its lines counted.
    w.line_at(pos);
    w.newlines += newlines;
    w.buf.clear();
    w.lines_at = 0;
    w.base = start + bytes;
    w.input.seek(SeekFrom::Start(w.base))?;
    Ok(true)
}

/// Counts the bytes (and newlines) serde_json takes: it takes a value's bytes one at a time and
/// none after its end, so the count is where the value ends.
struct Tally<R> {
    inner: R,
    bytes: u64,
    newlines: u64,
}

impl<R: std::io::Read> std::io::Read for Tally<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes += n as u64;
        self.newlines += memchr::memchr_iter(b'\n', buf.get(..n).unwrap_or_default()).count() as u64;
        Ok(n)
    }
}

/// The top-level fields of a large object that decide whether it is a List, without its items.
#[derive(Default)]
struct ListHead {
    kind: Option<Value>,
    api_version: Option<Value>,
    /// `items` keys holding an array (a second `items` key would replace the first in a whole
    /// read: such a value is read whole).
    items_arrays: usize,
    has_type: bool,
    has_object: bool,
}

impl ListHead {
    fn kind(&self) -> &str {
        self.kind.as_ref().and_then(Value::as_str).unwrap_or_default()
    }

    fn is_watch_event(&self) -> bool {
        self.has_type && self.has_object && self.kind.is_none()
    }

    fn list_of(&self) -> ListOf {
        let kind = self.kind().to_owned();
        ListOf {
            item_kind: kind.strip_suffix("List").filter(|k| !k.is_empty()).map(str::to_owned),
            api_version: self.api_version.as_ref().and_then(Value::as_str).map(str::to_owned),
            kind,
        }
    }
}

impl<'de> serde::Deserialize<'de> for ListHead {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = ListHead;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<ListHead, A::Error> {
                let mut head = ListHead::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "kind" => head.kind = Some(map.next_value()?),
                        "apiVersion" => head.api_version = Some(map.next_value()?),
                        "items" => head.items_arrays += usize::from(map.next_value::<IsArray>()?.0),
                        other => {
                            head.has_type |= other == "type";
                            head.has_object |= other == "object";
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                Ok(head)
            }
        }
        d.deserialize_map(Fields)
    }
}

/// Whether a value is an array, read without keeping it.
struct IsArray(bool);

impl<'de> serde::Deserialize<'de> for IsArray {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Probe;
        impl<'de> serde::de::Visitor<'de> for Probe {
            type Value = IsArray;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any value")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<IsArray, A::Error> {
                while seq.next_element::<serde::de::IgnoredAny>()?.is_some() {}
                Ok(IsArray(true))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<IsArray, A::Error> {
                while map.next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?.is_some() {}
                Ok(IsArray(false))
            }
            fn visit_bool<E>(self, _: bool) -> Result<IsArray, E> {
                Ok(IsArray(false))
            }
            fn visit_i64<E>(self, _: i64) -> Result<IsArray, E> {
                Ok(IsArray(false))
            }
            fn visit_u64<E>(self, _: u64) -> Result<IsArray, E> {
                Ok(IsArray(false))
            }
            fn visit_f64<E>(self, _: f64) -> Result<IsArray, E> {
                Ok(IsArray(false))
            }
            fn visit_str<E>(self, _: &str) -> Result<IsArray, E> {
                Ok(IsArray(false))
            }
            fn visit_unit<E>(self) -> Result<IsArray, E> {
                Ok(IsArray(false))
            }
        }
        d.deserialize_any(Probe)
    }
}

/// The second pass of [`stream_list`]: each item of the List's `items` handed to the reader as
/// soon as it is parsed; the other fields skipped.
struct ListItems<'a, 'r> {
    list: &'a ListOf,
    reader: &'a mut Reader<'r>,
    diags: &'a mut Diagnostics,
    at: &'a Position,
}

impl<'de> serde::de::DeserializeSeed<'de> for ListItems<'_, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ListItems<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a List")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let ListItems { list, reader, diags, at } = self;
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                map.next_value_seed(Items { list, reader: &mut *reader, diags: &mut *diags, at })?;
            } else {
                map.next_value::<serde::de::IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

/// The `items` array of [`ListItems`].
struct Items<'a, 'r> {
    list: &'a ListOf,
    reader: &'a mut Reader<'r>,
    diags: &'a mut Diagnostics,
    at: &'a Position,
}

impl<'de> serde::de::DeserializeSeed<'de> for Items<'_, '_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Items<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of objects")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        while let Some(item) = seq.next_element::<Value>()? {
            self.reader.list_item(self.list, i, item, self.at, self.diags);
            i += 1;
        }
        Ok(())
    }
}

/// The part of a stream in memory: `buf` holds the bytes from file offset `base` on. Bytes
/// before a value being parsed are dropped as the window moves; a value that does not fit makes
/// the next read as large as the window, so a long value is parsed a bounded number of times.
struct Window<'r> {
    input: &'r mut dyn ReadSeek,
    buf: Vec<u8>,
    base: u64,
    eof: bool,
    /// Bytes read at least per read.
    chunk: usize,
    /// Newlines up to `lines_at` in `buf`, counting those already dropped, so that line numbers
    /// cost one pass over the stream.
    lines_at: usize,
    newlines: u64,
    /// The most bytes `buf` held.
    most: usize,
}

impl<'r> Window<'r> {
    fn new(input: &'r mut dyn ReadSeek, chunk: usize) -> Self {
        Window { input, buf: Vec::new(), base: 0, eof: false, chunk: chunk.max(1), lines_at: 0, newlines: 0, most: 0 }
    }

    /// The file offset of `buf[i]`.
    fn offset(&self, i: usize) -> u64 {
        self.base + i as u64
    }

    /// The 1-based line of `buf[i]`.
    fn line_at(&mut self, i: usize) -> u64 {
        let i = i.min(self.buf.len());
        if i >= self.lines_at {
            self.newlines += memchr::memchr_iter(b'\n', self.buf.get(self.lines_at..i).unwrap_or_default()).count() as u64;
            self.lines_at = i;
            return self.newlines + 1;
        }
        let between = memchr::memchr_iter(b'\n', self.buf.get(i..self.lines_at).unwrap_or_default()).count() as u64;
        self.newlines - between + 1
    }

    /// Appends at least one read's worth of input (`eof` once there is none left).
    fn read_more(&mut self) -> std::io::Result<()> {
        let want = self.chunk.max(self.buf.len()) as u64;
        let got = std::io::Read::read_to_end(&mut std::io::Read::take(&mut *self.input, want), &mut self.buf)?;
        if got == 0 {
            self.eof = true;
        }
        self.most = self.most.max(self.buf.len());
        Ok(())
    }

    /// Drops `buf[..keep_from]` and reads more; returns where `buf[keep_from]` now is (0).
    fn refill(&mut self, keep_from: usize) -> std::io::Result<usize> {
        let keep_from = keep_from.min(self.buf.len());
        self.line_at(keep_from);
        self.buf.drain(..keep_from);
        self.lines_at -= keep_from;
        self.base += keep_from as u64;
        self.read_more()?;
        Ok(0)
    }
}

fn skip_whitespace(bytes: &[u8], mut pos: usize) -> usize {
    while bytes.get(pos).is_some_and(u8::is_ascii_whitespace) {
        pos += 1;
    }
    pos
}

/// serde_json's message without its "at line L column C" (those count from the value, not the file).
fn without_position(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    match msg.rfind(" at line ") {
        Some(i) => msg.get(..i).unwrap_or(&msg).to_owned(),
        None => msg,
    }
}

/// Byte offset in `slice` of serde_json's 1-based line and (byte) column.
fn offset_in(slice: &[u8], line: usize, column: usize) -> usize {
    let line_start = if line <= 1 {
        0
    } else {
        memchr::memchr_iter(b'\n', slice).nth(line - 2).map_or(slice.len(), |i| i + 1)
    };
    (line_start + column.saturating_sub(1)).min(slice.len())
}

/// Where to resume after a syntax error at `err_at` in the value starting at `value_start`:
/// the first line after the error's whose first non-blank byte is `{`, reading on as far as
/// needed, or the error itself when it is such a `{` (a truncated object is often followed
/// directly by the next one). `None` at the end of the stream.
fn resume(w: &mut Window<'_>, err_at: usize, value_start: usize) -> std::io::Result<Option<usize>> {
    let err_at = err_at.min(w.buf.len());
    let line_start = memchr::memrchr(b'\n', w.buf.get(..err_at).unwrap_or_default()).map_or(0, |i| i + 1);
    let blank_before = w.buf.get(line_start..err_at).is_some_and(|s| s.iter().all(|b| is_blank(*b)));
    if err_at > value_start && blank_before && w.buf.get(err_at) == Some(&b'{') {
        return Ok(Some(err_at));
    }
    let mut scan = scan_lines(&w.buf, err_at, false);
    loop {
        scan = match scan {
            LineScan::Found(at) => return Ok(Some(at)),
            _ if w.eof => return Ok(None),
            LineScan::Open(line) => {
                w.refill(line)?;
                scan_lines(&w.buf, 0, true)
            }
            LineScan::Searching => {
                let end = w.buf.len();
                w.refill(end)?;
                scan_lines(&w.buf, 0, false)
            }
        };
    }
}

fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r')
}

/// What a look for a line opening an object found in the window.
enum LineScan {
    /// The `{` of such a line.
    Found(usize),
    /// A line (its start) whose first non-blank byte is past the window.
    Open(usize),
    /// No such line; the window ends inside a line that is not one.
    Searching,
}

/// Looks for a line whose first non-blank byte is `{` among the lines that start after `from`
/// (and the one at `from`, if `at_line_start`).
fn scan_lines(bytes: &[u8], from: usize, at_line_start: bool) -> LineScan {
    let check = |start: usize| -> Option<LineScan> {
        let mut j = start;
        while bytes.get(j).is_some_and(|b| is_blank(*b)) {
            j += 1;
        }
        match bytes.get(j) {
            None => Some(LineScan::Open(start)),
            Some(b'{') => Some(LineScan::Found(j)),
            Some(_) => None,
        }
    };
    if at_line_start && let Some(found) = check(from) {
        return found;
    }
    let tail = bytes.get(from..).unwrap_or_default();
    for nl in memchr::memchr_iter(b'\n', tail) {
        if let Some(found) = check(from + nl + 1) {
            return found;
        }
    }
    LineScan::Searching
}

/// Multi-document YAML, cut on `---` / `...` lines first so that one bad document is reported
/// with its own line and the others are still read.
fn read_yaml_documents(bytes: &[u8], reader: &mut Reader<'_>, diags: &mut Diagnostics) {
    let bytes = bytes.strip_prefix(BOM).unwrap_or(bytes);
    for doc in split_yaml(bytes) {
        let Some(first_line) = doc.first_content_line else { continue };
        let Ok(text) = std::str::from_utf8(doc.bytes) else {
            diags.error(
                reader.path,
                Position::Line(first_line),
                "invalid_yaml",
                "document is not valid UTF-8",
            );
            continue;
        };
        match serde_yaml::from_str::<serde_yaml::Value>(text) {
            Ok(mut value) => {
                if value.apply_merge().is_err() {
                    diags.error(
                        reader.path,
                        Position::Line(first_line),
                        "invalid_yaml",
                        "a `<<` merge key does not hold a mapping",
                    );
                    continue;
                }
                if value.is_null() {
                    continue;
                }
                reader.value(yaml_to_json(value), Position::Line(first_line), diags);
            }
            Err(e) => {
                let line = e
                    .location()
                    .map_or(first_line, |l| doc.start_line + (l.line() as u64).saturating_sub(1));
                let msg = e.to_string();
                // serde_yaml appends a position relative to the document: drop it, ours is absolute.
                let msg = msg.rfind(" at line ").and_then(|i| msg.get(..i)).unwrap_or(&msg);
                diags.error(reader.path, Position::Line(line), "invalid_yaml", msg.to_owned());
            }
        }
    }
}

struct YamlDoc<'a> {
    bytes: &'a [u8],
    /// 1-based line of the document's first byte in the file.
    start_line: u64,
    /// First line holding something other than blanks, comments, directives or a bare `---`.
    first_content_line: Option<u64>,
}

fn split_yaml(bytes: &[u8]) -> Vec<YamlDoc<'_>> {
    let mut docs = Vec::new();
    let mut start = 0usize;
    let mut start_line = 1u64;
    let mut content: Option<u64> = None;
    let mut pos = 0usize;
    let mut line_no = 1u64;
    while pos < bytes.len() {
        let end = memchr::memchr(b'\n', bytes.get(pos..).unwrap_or_default()).map_or(bytes.len(), |i| pos + i);
        let line = bytes.get(pos..end).unwrap_or_default();
        let next = end + 1;
        if is_marker(line, b"---") {
            docs.push(YamlDoc {
                bytes: bytes.get(start..pos).unwrap_or_default(),
                start_line,
                first_content_line: content,
            });
            start = pos;
            start_line = line_no;
            // `--- {a: 1}` or `--- !tag` puts content on the marker line itself.
            let after = line.get(3..).unwrap_or_default();
            content = if is_blank_or_comment(after) { None } else { Some(line_no) };
        } else if is_marker(line, b"...") {
            docs.push(YamlDoc {
                bytes: bytes.get(start..pos).unwrap_or_default(),
                start_line,
                first_content_line: content,
            });
            start = next.min(bytes.len());
            start_line = line_no + 1;
            content = None;
        } else if content.is_none() && !is_blank_or_comment(line) && line.first() != Some(&b'%') {
            content = Some(line_no);
        }
        pos = next;
        line_no += 1;
    }
    docs.push(YamlDoc {
        bytes: bytes.get(start..).unwrap_or_default(),
        start_line,
        first_content_line: content,
    });
    docs
}

/// A document marker sits at column 0 and is followed by nothing or by a blank.
fn is_marker(line: &[u8], marker: &[u8]) -> bool {
    line.starts_with(marker) && line.get(3).is_none_or(|b| matches!(b, b' ' | b'\t' | b'\r'))
}

fn is_blank_or_comment(line: &[u8]) -> bool {
    let trimmed = line.iter().position(|b| !b.is_ascii_whitespace()).and_then(|i| line.get(i..));
    match trimmed {
        None => true,
        Some(rest) => rest.first() == Some(&b'#'),
    }
}

/// YAML keys may be numbers or booleans; JSON keys are strings. Tags are dropped.
fn yaml_to_json(v: serde_yaml::Value) -> Value {
    match v {
        serde_yaml::Value::Null => Value::Null,
        serde_yaml::Value::Bool(b) => Value::Bool(b),
        serde_yaml::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::from(i)
            } else if let Some(u) = n.as_u64() {
                Value::from(u)
            } else {
                n.as_f64().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
            }
        }
        serde_yaml::Value::String(s) => Value::String(s),
        serde_yaml::Value::Sequence(items) => Value::Array(items.into_iter().map(yaml_to_json).collect()),
        serde_yaml::Value::Mapping(m) => {
            let mut out = Map::new();
            for (k, v) in m {
                out.insert(yaml_key(k), yaml_to_json(v));
            }
            Value::Object(out)
        }
        serde_yaml::Value::Tagged(t) => yaml_to_json(t.value),
    }
}

fn yaml_key(k: serde_yaml::Value) -> String {
    match yaml_to_json(k) {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    const REAL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/real");
    /// The "file modification time" handed to the reader in these tests.
    const MTIME: i64 = 1_700_000_000_000;

    fn fixture(rel: &str) -> (Vec<ObjectVersion>, Diagnostics) {
        let path = PathBuf::from(REAL).join(rel);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut diags = Diagnostics::new();
        let out = read_objects(&path, &bytes, MTIME, &mut diags);
        (out, diags)
    }

    fn read_text(name: &str, text: &str) -> (Vec<ObjectVersion>, Diagnostics) {
        let mut diags = Diagnostics::new();
        let out = read_objects(Path::new(name), text.as_bytes(), MTIME, &mut diags);
        (out, diags)
    }

    fn field<'a>(v: &'a ObjectVersion, keys: &[&str]) -> Option<&'a Value> {
        keys.iter().try_fold(&v.object, |cur, k| cur.get(*k))
    }

    fn s<'a>(v: &'a ObjectVersion, keys: &[&str]) -> Option<&'a str> {
        field(v, keys).and_then(Value::as_str)
    }

    fn names(out: &[ObjectVersion]) -> Vec<&str> {
        out.iter().map(|v| s(v, &["metadata", "name"]).unwrap_or("?")).collect()
    }

    fn kinds(out: &[ObjectVersion]) -> Vec<&str> {
        out.iter().map(|v| s(v, &["kind"]).unwrap_or("?")).collect()
    }

    fn error_types(d: &Diagnostics) -> Vec<&'static str> {
        d.errors.iter().map(|e| e.error_type).collect()
    }

    #[test]
    fn ndjson_watch_stream_fixture_pending_to_running() {
        let (out, d) = fixture("k8s-pods-nodes-watch/watch-stream-pods-ndjson-2016-pending-to-running.jsonl");
        assert!(d.errors.is_empty() && d.warnings.is_empty(), "{d:?}");
        assert_eq!(out.len(), 4);
        let types: Vec<&str> = out.iter().map(|v| v.event_type.as_str()).collect();
        assert_eq!(types, ["ADDED", "MODIFIED", "MODIFIED", "MODIFIED"]);
        assert_eq!(out.iter().map(|v| v.seq).collect::<Vec<_>>(), [0, 1, 2, 3]);
        assert_eq!(names(&out), ["nginx-app-o0kvl"; 4]);
        let nodes: Vec<Option<&str>> = out.iter().map(|v| s(v, &["spec", "nodeName"])).collect();
        assert_eq!(nodes, [None, Some("10.240.0.4"), Some("10.240.0.4"), Some("10.240.0.4")]);
        let rvs: Vec<&str> = out.iter().map(|v| s(v, &["metadata", "resourceVersion"]).unwrap_or("?")).collect();
        assert_eq!(rvs, ["228082", "228084", "228088", "228094"]);
        let phases: Vec<&str> = out.iter().map(|v| s(v, &["status", "phase"]).unwrap_or("?")).collect();
        assert_eq!(phases, ["Pending", "Pending", "Pending", "Running"]);
        // creationTimestamp 08:00:51 for the first three (startTime and the Ready transition of
        // the third are 08:00:51 too); the Running version's Ready transition is 08:00:52.
        let times: Vec<i64> = out.iter().map(|v| v.observed_at_ms).collect();
        assert_eq!(times, [1458028851000, 1458028851000, 1458028851000, 1458028852000]);
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        // The escaped JSON inside the created-by annotation survives as a string.
        let created_by = s(&out[0], &["metadata", "annotations", "kubernetes.io/created-by"]).unwrap_or("");
        assert!(created_by.starts_with("{\"kind\":\"SerializedReference\""), "{created_by}");
        assert!(created_by.ends_with("}}\n"));
    }

    #[test]
    fn pretty_watch_event_with_filler_type_is_an_error() {
        let (out, d) = fixture("k8s-pods-nodes-watch/watch-event-fieldcomplete.json");
        assert!(out.is_empty());
        assert_eq!(error_types(&d), ["unknown_watch_type"]);
        assert_eq!(d.errors[0].position, Position::Byte { offset: 0, line: 1 });
        assert!(d.errors[0].reason.contains("\"typeValue\""), "{}", d.errors[0].reason);
        assert!(d.warnings.is_empty() && d.skipped.is_empty());
    }

    #[test]
    fn node_yaml_with_kubectl_edit_header_and_long_annotation() {
        let (out, d) = fixture("k8s-pods-nodes-watch/node-a100-mig-4-instances.yaml");
        assert!(d.errors.is_empty() && d.warnings.is_empty(), "{d:?}");
        assert_eq!(out.len(), 1);
        let node = &out[0];
        assert_eq!((node.seq, node.event_type.as_str()), (0, "SNAPSHOT"));
        assert_eq!(kinds(&out), ["Node"]);
        assert_eq!(names(&out), ["qa-mig-worker-gpu-a100"]);
        // Line 15 of the file: a 1848-byte plain scalar listing 71 feature labels.
        let nfd = s(node, &["metadata", "annotations", "nfd.node.kubernetes.io/feature-labels"]).unwrap_or("");
        assert_eq!(nfd.len(), 1848);
        assert_eq!(nfd.split(',').count(), 71);
        assert!(nfd.starts_with("cpu-cpuid.ADX,cpu-cpuid.AESNI,cpu-cpuid.AVX,"));
        assert!(nfd.ends_with(",system-os_release.VERSION_ID.major,system-os_release.VERSION_ID.minor"));
        let mig_config = s(node, &["metadata", "annotations", "run.ai/mig.config"]).unwrap_or("");
        assert!(mig_config.starts_with("version: v1\nmig-configs:\n  selected:\n"), "{mig_config}");
        assert_eq!(s(node, &["metadata", "labels", "nvidia.com/gpu.count"]), Some("1"));
        assert_eq!(s(node, &["status", "capacity", "nvidia.com/mig-1g.5gb"]), Some("3"));
        // Latest: the conditions' lastHeartbeatTime 2023-01-19T06:39:30Z.
        assert_eq!(node.observed_at_ms, 1674110370000);

        let (out, d) = fixture("k8s-pods-nodes-watch/node-2x-t4-fractional.yaml");
        assert!(d.errors.is_empty() && d.warnings.is_empty(), "{d:?}");
        assert_eq!(names(&out), ["qa-mig-worker-gpu-1"]);
        assert_eq!(out[0].observed_at_ms, 1674110980000); // lastHeartbeatTime 06:49:40
    }

    #[test]
    fn pod_yaml_fixtures() {
        let (out, d) = fixture("k8s-pods-nodes-watch/pod-mig-1g5gb-runai-a100.yaml");
        assert!(d.errors.is_empty() && d.warnings.is_empty(), "{d:?}");
        assert_eq!(names(&out), ["job-2-0-0"]);
        assert_eq!(s(&out[0], &["metadata", "namespace"]), Some("runai-team-a"));
        // A plain scalar folded over two lines reads back with one space.
        assert_eq!(
            s(&out[0], &["metadata", "annotations", "runai-cli-command"]),
            Some("runai submit -i gshaibi/gpu-burn --mig-profile 1g.5gb --cpu 0.5")
        );
        assert_eq!(s(&out[0], &["metadata", "annotations", "nvidia.com/mig-1g.5gb"]), Some("1"));
        // Ready / ContainersReady transitions at 07:56:57 are the latest times.
        assert_eq!(out[0].observed_at_ms, 1674115017000);

        let (out, d) = fixture("k8s-pods-nodes-watch/pod-runai-fractional-gpu-aws.yaml");
        assert!(d.errors.is_empty() && d.warnings.is_empty(), "{d:?}");
        assert_eq!(names(&out), ["frac-1-0-0"]);
        assert_eq!(s(&out[0], &["spec", "nodeName"]), Some("i-0b498db53280b86a6"));
        assert_eq!(out[0].observed_at_ms, 1711875831000); // 2024-03-31T09:03:51Z
    }

    #[test]
    fn json_object_fixtures_and_managed_fields() {
        let (out, d) = fixture("k8s-pods-nodes-watch/k9s-pod-minikube.json");
        assert!(d.is_clean() && d.warnings.is_empty());
        assert_eq!((kinds(&out), names(&out)), (vec!["Pod"], vec!["nginx"]));
        assert_eq!(out[0].observed_at_ms, 1565327541000); // Ready at 2019-08-09T05:12:21Z

        let (out, d) = fixture("k8s-pods-nodes-watch/k9s-node-minikube.json");
        assert!(d.is_clean() && d.warnings.is_empty());
        assert_eq!(names(&out), ["minikube"]);
        assert_eq!(out[0].observed_at_ms, 1567226591000); // heartbeat 2019-08-31T04:43:11Z

        let (out, d) = fixture("k8s-pods-nodes-watch/node-fieldcomplete.json");
        assert!(d.is_clean() && d.warnings.is_empty());
        assert_eq!(names(&out), ["nameValue"]);
        let meta = field(&out[0], &["metadata"])
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        assert!(!meta.contains_key("managedFields"));
        assert!(meta.contains_key("finalizers"));
        // deletionTimestamp 2009 beats creation 2008 and the 2003/2004 condition times; the
        // managedFields time (2004) and spec.taints[].timeAdded are not looked at.
        assert_eq!(out[0].observed_at_ms, 1230771661000);

        // Events use their own times only: eventTime 2010-01-01T01:01:01.000010Z is the latest.
        let (out, d) = fixture("k8s-events/core-v1-event-fieldcomplete.json");
        assert!(d.is_clean() && d.warnings.is_empty());
        assert_eq!((kinds(&out), out[0].event_type.as_str()), (vec!["Event"], "SNAPSHOT"));
        assert!(field(&out[0], &["metadata", "managedFields"]).is_none());
        assert_eq!(out[0].observed_at_ms, 1262307661000);

        // deprecatedLastTimestamp 2014-01-01T01:01:01Z.
        let (out, d) = fixture("k8s-events/events-k8s-io-v1-event-fieldcomplete.json");
        assert!(d.is_clean() && d.warnings.is_empty());
        assert_eq!(s(&out[0], &["apiVersion"]), Some("events.k8s.io/v1"));
        assert_eq!(out[0].observed_at_ms, 1388538061000);

        // eventTime is null here; first/last/creation are all 2019-08-30T20:43:05Z.
        let (out, d) = fixture("k8s-events/k9s-event-gke-pulled.json");
        assert!(d.is_clean() && d.warnings.is_empty());
        assert_eq!(names(&out), ["hello-1567197780-mn4mv.15bfce150bd764dd"]);
        assert_eq!(out[0].observed_at_ms, 1567197785000);
    }

    #[test]
    fn kueue_yaml_fixtures() {
        let (out, d) = fixture("kueue/single-clusterqueue-setup.yaml");
        assert!(d.is_clean(), "{d:?}");
        assert_eq!(kinds(&out), ["ResourceFlavor", "ClusterQueue", "LocalQueue"]);
        assert_eq!(names(&out), ["default-flavor", "cluster-queue", "user-queue"]);
        assert_eq!(out.iter().map(|v| v.seq).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(out.iter().all(|v| v.observed_at_ms == MTIME && v.event_type == EventType::Snapshot));
        // None of these records a time: one warning for the file, counting all three.
        assert_eq!(d.warnings.len(), 1);
        assert_eq!(
            (d.warnings[0].error_type, &d.warnings[0].position),
            ("time_from_mtime", &Position::File)
        );
        assert!(d.warnings[0].reason.starts_with("3 object version(s)"), "{}", d.warnings[0].reason);
        assert_eq!(s(&out[2], &["spec", "clusterQueue"]), Some("cluster-queue"));

        // Leading `---`, inline comments, an empty line before a separator.
        let (out, d) = fixture("kueue/kueueviz-cluster-queues-cohort-preemption.yaml");
        assert!(d.is_clean(), "{d:?}");
        assert_eq!(
            names(&out),
            [
                "emergency-cluster-queue",
                "agi-cluster-queue",
                "llm-cluster-queue",
                "unused-cluster-queue"
            ]
        );
        assert_eq!(s(&out[0], &["spec", "cohortName"]), Some("ai-for-humanity-foundation"));
        assert_eq!(s(&out[0], &["spec", "preemption", "reclaimWithinCohort"]), Some("Any"));
        assert!(d.warnings[0].reason.starts_with("4 object version(s)"));

        // `kind` before `apiVersion` in one document; a Topology among them.
        let (out, d) = fixture("kueue/tas-gpu-queues-topology-flavor-cq-lq.yaml");
        assert!(d.is_clean(), "{d:?}");
        assert_eq!(kinds(&out), ["Topology", "ResourceFlavor", "ClusterQueue", "LocalQueue"]);
        assert_eq!(names(&out), ["default", "tas-flavor", "tas-cluster-queue", "tas-user-queue"]);

        let (out, d) = fixture("kueue/resource-flavor-spot-taints.yaml");
        assert!(d.is_clean(), "{d:?}");
        assert_eq!(names(&out), ["spot"]);
        let taint = field(&out[0], &["spec", "nodeTaints"]).and_then(|t| t.get(0));
        assert_eq!(taint.and_then(|t| t.get("value")), Some(&Value::String("true".into())));

        let (out, d) = fixture("kueue/workload-manifest-spec-only.yaml");
        assert!(d.is_clean(), "{d:?}");
        assert_eq!((kinds(&out), names(&out)), (vec!["Workload"], vec!["sample-job"]));
        let pod_set = field(&out[0], &["spec", "podSets"]).and_then(|p| p.get(0));
        assert_eq!(pod_set.and_then(|p| p.get("count")), Some(&Value::from(3)));
        assert_eq!(out[0].observed_at_ms, MTIME);
    }

    #[test]
    fn workload_status_fragments_are_not_objects() {
        for rel in [
            "kueue/workload-status-admissioncheck-pending.yaml",
            "kueue/workload-status-inadmissible-missing-localqueue.yaml",
            "kueue/workload-status-pending-insufficient-quota.yaml",
            "kueue/workload-status-preempted-evicted.yaml",
        ] {
            let (out, d) = fixture(rel);
            assert!(out.is_empty(), "{rel}");
            assert_eq!(error_types(&d), ["not_an_object"], "{rel}");
            assert_eq!(d.errors[0].position, Position::Line(1), "{rel}");
            assert!(d.warnings.is_empty(), "{rel}");
        }
    }

    #[test]
    fn pretty_printed_watch_events_concatenated_without_separator() {
        // As `kubectl get --watch --output-watch-events -o json` writes them; the third event
        // records an older time than the second and is clamped to it.
        let text = r#"{
    "type": "ADDED",
    "object": {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "creationTimestamp": "2024-05-01T10:00:00Z"}
    }
}{
    "type": "MODIFIED",
    "object": {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "creationTimestamp": "2024-05-01T10:00:00Z"},
        "status": {"startTime": "2024-05-01T11:00:00Z"}
    }
}
{
    "type": "DELETED",
    "object": {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "creationTimestamp": "2024-05-01T10:05:00Z"}
    }
}
"#;
        let (out, d) = read_text("watch.json", text);
        assert!(d.is_clean() && d.warnings.is_empty(), "{d:?}");
        let types: Vec<&str> = out.iter().map(|v| v.event_type.as_str()).collect();
        assert_eq!(types, ["ADDED", "MODIFIED", "DELETED"]);
        let times: Vec<i64> = out.iter().map(|v| v.observed_at_ms).collect();
        assert_eq!(times, [1714557600000, 1714561200000, 1714561200000]);
    }

    #[test]
    fn truncated_last_object_reports_where_it_starts() {
        let good = r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a","creationTimestamp":"2024-05-01T10:00:00Z"}}"#;
        let text = format!(
            "{good}\n{}\n{{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{{\"na",
            good.replace("\"a\"", "\"b\"")
        );
        let (out, d) = read_text("ns.json", &text);
        assert_eq!(names(&out), ["a", "b"]);
        assert_eq!(error_types(&d), ["truncated_json"]);
        let third = 2 * (good.len() + 1);
        assert_eq!(
            d.errors[0].position,
            Position::Byte {
                offset: third as u64,
                line: 3
            }
        );
    }

    #[test]
    fn broken_object_in_the_middle_of_ndjson_costs_one_object() {
        let line = |name: &str| {
            format!(
                r#"{{"type":"ADDED","object":{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","namespace":"d","creationTimestamp":"2024-05-01T10:00:00Z"}}}}}}"#
            )
        };
        // Line 2 misses a comma.
        let text = format!(
            "{}\n{{\"type\":\"ADDED\",\"object\":{{\"kind\":\"Pod\" \"apiVersion\":\"v1\"}}}}\n{}\n",
            line("one"),
            line("three")
        );
        let (out, d) = read_text("pods.ndjson", &text);
        assert_eq!(names(&out), ["one", "three"]);
        assert_eq!(out.iter().map(|v| v.seq).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(error_types(&d), ["invalid_json"]);
        let line2 = line("one").len() + 1;
        // The parser stops at the `"` after the blank that should have been a comma: column 40.
        assert_eq!(
            d.errors[0].position,
            Position::Byte {
                offset: (line2 + 39) as u64,
                line: 2
            }
        );
        assert!(d.errors[0].reason.contains("value starting at line 2"), "{}", d.errors[0].reason);

        // An object cut short and followed at once by the next line: only the cut one is lost.
        let text = format!(
            "{}\n{{\"type\":\"ADDED\",\"object\":{{\"kind\":\"Pod\"\n{}\n",
            line("one"),
            line("three")
        );
        let (out, d) = read_text("pods.jsonl", &text);
        assert_eq!(names(&out), ["one", "three"]);
        assert_eq!(error_types(&d), ["invalid_json"]);
        let line3 = line2 + "{\"type\":\"ADDED\",\"object\":{\"kind\":\"Pod\"".len() + 1;
        assert_eq!(
            d.errors[0].position,
            Position::Byte {
                offset: line3 as u64,
                line: 3
            }
        );
    }

    #[test]
    fn long_stream_counts_lines_and_offsets_exactly() {
        let mut text = String::new();
        let mut broken_at = 0;
        for i in 1..=3000 {
            if i == 2500 {
                broken_at = text.len();
                text.push_str("  {\"type\":\"MODIFIED\",\"object\":{]}\n");
                continue;
            }
            text.push_str(&format!(
                "  {{\"type\":\"MODIFIED\",\"object\":{{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{{\"name\":\"n{i}\"}}}}}}\n"
            ));
        }
        let (out, d) = read_text("big.jsonl", &text);
        assert_eq!(out.len(), 2999);
        assert_eq!(s(&out[2498], &["metadata", "name"]), Some("n2499"));
        assert_eq!(s(&out[2499], &["metadata", "name"]), Some("n2501"));
        assert_eq!(error_types(&d), ["invalid_json"]);
        // `]` is the 32nd byte of the line: two blanks, then 29 bytes up to the inner `{`.
        assert_eq!(d.errors[0].position, Position::Byte { offset: (broken_at + 31) as u64, line: 2500 });
        assert_eq!(d.warnings.len(), 1);
        assert!(d.warnings[0].reason.starts_with("2999 object version(s)"));
    }

    #[test]
    fn yaml_with_one_invalid_document() {
        let text = "\
apiVersion: v1
kind: Namespace
metadata:
  name: team-a
---
apiVersion: v1
kind: Namespace
metadata:
  name: team: b
---
# the third one is fine again
apiVersion: v1
kind: Namespace
metadata:
  name: team-c
";
        let (out, d) = read_text("ns.yaml", text);
        assert_eq!(names(&out), ["team-a", "team-c"]);
        assert_eq!(out.iter().map(|v| v.seq).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(error_types(&d), ["invalid_yaml"]);
        assert_eq!(d.errors[0].position, Position::Line(9));
        assert!(!d.errors[0].reason.contains(" at line "), "{}", d.errors[0].reason);
        // A value-level problem names the document's first content line (after the comment).
        let (out, d) = read_text("x.yml", "a: 1\n---\n# c\n- 1\n- 2\n");
        assert!(out.is_empty());
        assert_eq!(error_types(&d), ["not_an_object", "not_an_object"]);
        assert_eq!(d.errors[0].position, Position::Line(1));
        assert_eq!(d.errors[1].position, Position::Line(4));
        assert!(d.errors[1].reason.contains("an array"));
    }

    #[test]
    fn bookmark_error_and_unknown_watch_types() {
        let text = r#"{"type":"BOOKMARK","object":{"kind":"Pod","apiVersion":"v1","metadata":{"resourceVersion":"12746"}}}
{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}}
{"type":"SYNC","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"x"}}}
{"type":"ADDED","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"y","namespace":"d","creationTimestamp":"2024-05-01T10:00:00Z"}}}
"#;
        let (out, d) = read_text("w.json", text);
        assert_eq!(names(&out), ["y"]);
        assert_eq!(out[0].seq, 0);
        assert_eq!(d.skipped.get("watch_bookmark"), Some(&1));
        assert_eq!(error_types(&d), ["watch_error", "unknown_watch_type"]);
        assert!(matches!(d.errors[0].position, Position::Byte { line: 2, .. }));
        assert_eq!(
            d.errors[0].reason,
            "watch ERROR event: Expired (410): too old resource version: 1 (2)"
        );
        assert!(matches!(d.errors[1].position, Position::Byte { line: 3, .. }));
        assert!(d.errors[1].reason.contains("\"SYNC\""));
    }

    #[test]
    fn lists_typed_and_untyped() {
        // `kubectl get pods -o json`: a PodList whose items may leave out apiVersion/kind.
        let text = r#"{"apiVersion":"v1","kind":"PodList","metadata":{"resourceVersion":"9"},"items":[
  {"metadata":{"name":"p1","namespace":"d","creationTimestamp":"2024-05-01T10:00:00Z"}},
  {"apiVersion":"v1","kind":"Pod","metadata":{"name":"p2","namespace":"d","creationTimestamp":"2024-05-01T10:05:00Z"}},
  7
]}"#;
        let (out, d) = read_text("pods.json", text);
        assert_eq!(names(&out), ["p1", "p2"]);
        assert_eq!(kinds(&out), ["Pod", "Pod"]);
        assert_eq!(s(&out[0], &["apiVersion"]), Some("v1"));
        assert!(out.iter().all(|v| v.event_type == EventType::Snapshot));
        assert_eq!(
            out.iter().map(|v| v.observed_at_ms).collect::<Vec<_>>(),
            [1714557600000, 1714557900000]
        );
        assert_eq!(error_types(&d), ["not_an_object"]);
        assert!(d.errors[0].reason.starts_with("item 2 of the PodList"));

        // `kubectl get ns,jobs -o yaml`: a List of mixed kinds.
        let text = "\
apiVersion: v1
items:
- apiVersion: v1
  kind: Namespace
  metadata:
    name: team-a
- apiVersion: batch/v1
  kind: Job
  metadata:
    name: train
    namespace: team-a
kind: List
metadata:
  resourceVersion: \"\"
";
        let (out, d) = read_text("all.yaml", text);
        assert!(d.is_clean(), "{d:?}");
        assert_eq!(kinds(&out), ["Namespace", "Job"]);
        assert_eq!(out.iter().map(|v| v.seq).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(d.warnings.len(), 1);
        assert!(d.warnings[0].reason.starts_with("2 object version(s)"));
    }

    #[test]
    fn objects_without_time_take_the_file_time_with_one_warning() {
        let text = r#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}}
{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"b","creationTimestamp":"2024-05-01T10:00:00Z"}}
{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"c","labels":{"x":"y"}},"status":{"phase":"Active"}}
{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"d","creationTimestamp":"not a time"}}
"#;
        let (out, d) = read_text("ns.json", text);
        assert!(d.is_clean());
        assert_eq!(
            out.iter().map(|v| v.observed_at_ms).collect::<Vec<_>>(),
            [MTIME, 1714557600000, MTIME, MTIME]
        );
        assert_eq!(d.warnings.len(), 1);
        assert_eq!(d.warnings[0].error_type, "time_from_mtime");
        assert!(d.warnings[0].reason.starts_with("3 object version(s)"), "{}", d.warnings[0].reason);
    }

    #[test]
    fn future_requeue_time_and_foreign_event_fields_are_ignored() {
        let text = r#"{"apiVersion":"kueue.x-k8s.io/v1beta1","kind":"Workload","metadata":{"name":"w","namespace":"d","creationTimestamp":"2024-05-01T10:00:00Z"},
 "status":{"requeueState":{"count":1,"requeueAt":"2030-01-01T00:00:00Z"},"conditions":[{"type":"Evicted","status":"True","lastTransitionTime":"2024-05-01T10:05:00Z"}]}}
{"apiVersion":"v1","kind":"Event","metadata":{"name":"e","namespace":"d","creationTimestamp":"2024-05-01T10:00:00Z","deletionTimestamp":"2030-01-01T00:00:00Z"},
 "lastTimestamp":"2024-05-01T11:00:00Z","involvedObject":{"kind":"Pod","name":"p"},"status":{"finishedAt":"2030-01-01T00:00:00Z"}}
"#;
        let (out, d) = read_text("mixed.json", text);
        assert!(d.is_clean() && d.warnings.is_empty(), "{d:?}");
        assert_eq!(
            out.iter().map(|v| v.observed_at_ms).collect::<Vec<_>>(),
            [1714557900000, 1714561200000]
        );
    }

    #[test]
    fn non_objects_and_missing_names_are_reported() {
        let text = "42\n[1]\n{\"kind\":\"Pod\"}\n{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{}}\n\"s\"\n";
        let (out, d) = read_text("bad.json", text);
        assert!(out.is_empty());
        assert_eq!(
            error_types(&d),
            ["not_an_object", "not_an_object", "not_an_object", "missing_name", "not_an_object"]
        );
        let lines: Vec<u64> = d
            .errors
            .iter()
            .map(|e| match e.position {
                Position::Byte { line, .. } => line,
                _ => 0,
            })
            .collect();
        assert_eq!(lines, [1, 2, 3, 4, 5]);
        assert!(d.errors[2].reason.contains("no apiVersion"));
    }

    #[test]
    fn byte_order_mark_and_sniffed_format() {
        let mut bytes = BOM.to_vec();
        bytes.extend_from_slice(br#"{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}} {"#);
        let mut d = Diagnostics::new();
        let out = read_objects(Path::new("capture.out"), &bytes, MTIME, &mut d);
        assert_eq!(names(&out), ["a"]);
        assert_eq!(error_types(&d), ["truncated_json"]);
        assert_eq!(
            d.errors[0].position,
            Position::Byte {
                offset: bytes.len() as u64 - 1,
                line: 1
            }
        );

        let mut d = Diagnostics::new();
        let out = read_objects(
            Path::new("capture"),
            b"\xEF\xBB\xBF---\napiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n",
            MTIME,
            &mut d,
        );
        assert_eq!(names(&out), ["b"]);
        assert!(d.is_clean());
    }

    /// Hands out at most three bytes per read, as a pipe might; seeks like a file.
    struct Trickle<'a> {
        bytes: &'a [u8],
        at: usize,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let rest = self.bytes.get(self.at..).unwrap_or_default();
            let n = buf.len().min(rest.len()).min(3);
            buf[..n].copy_from_slice(&rest[..n]);
            self.at += n;
            Ok(n)
        }
    }

    impl std::io::Seek for Trickle<'_> {
        fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
            let std::io::SeekFrom::Start(at) = to else { panic!("only seeks from the start are used") };
            self.at = at as usize;
            Ok(at)
        }
    }

    /// `bytes` read as a JSON stream through a window of `window` bytes, Lists of `large` bytes
    /// or more an item at a time; also the most bytes the window held.
    fn read_windowed_large(path: &Path, bytes: &[u8], window: usize, large: usize) -> (Vec<ObjectVersion>, Diagnostics, usize) {
        let mut out = Vec::new();
        let mut diags = Diagnostics::new();
        let mut emit = |v: ObjectVersion, _: &mut Diagnostics| out.push(v);
        let mut reader = Reader::new(path, MTIME, &mut emit);
        let most = read_json_stream(&mut Trickle { bytes, at: 0 }, window, large, &mut reader, &mut diags).unwrap();
        reader.finish(&mut diags);
        (out, diags, most)
    }

    /// Like [`read_windowed_large`], with any value four windows long (64 bytes at least) taken
    /// as large, so that the Lists of the tests' inputs are read an item at a time.
    fn read_windowed(path: &Path, bytes: &[u8], window: usize) -> (Vec<ObjectVersion>, Diagnostics) {
        let (out, diags, _) = read_windowed_large(path, bytes, window, (4 * window).max(64));
        (out, diags)
    }

    #[test]
    fn a_large_list_is_read_an_item_at_a_time() {
        // A typed list whose items leave kind and apiVersion off, one item that is not an
        // object, then an object after it; keys in kubectl's order (items before kind).
        let mut list = String::from("{\n  \"apiVersion\": \"v1\",\n  \"items\": [\n");
        for i in 0..3000 {
            if i > 0 {
                list.push_str(",\n");
            }
            if i == 1500 {
                list.push_str("    7");
            } else {
                list.push_str(&format!("    {{\"metadata\": {{\"name\": \"p{i}\", \"namespace\": \"ml\", \"creationTimestamp\": \"2026-11-01T00:00:00Z\", \"labels\": {{\"a\": [1, 2.5, true, null]}}}}}}"));
            }
        }
        list.push_str("\n  ],\n  \"kind\": \"PodList\",\n  \"metadata\": {\"resourceVersion\": \"9\"}\n}\n");
        list.push_str("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"after\"}}\n");
        // An error after the list: its line number counts the list's lines.
        list.push_str("{\"apiVersion\": ]\n");
        let bytes = list.as_bytes();
        let mut whole_diags = Diagnostics::new();
        let whole = read_objects(Path::new("pods.json"), bytes, MTIME, &mut whole_diags);
        assert_eq!(whole.len(), 3000, "2999 pods and the namespace after the list");
        assert_eq!(error_types(&whole_diags), ["not_an_object", "invalid_json"]);
        assert!(matches!(whole_diags.errors[1].position, Position::Byte { line: 3009, .. }), "{:?}", whole_diags.errors[1].position);
        for window in [1, 100, 4096] {
            let (out, diags, most) = read_windowed_large(Path::new("pods.json"), bytes, window, 8 * 1024);
            assert_eq!(out, whole, "versions through a {window}-byte window");
            assert_eq!(diags.errors, whole_diags.errors);
            assert_eq!(diags.warnings, whole_diags.warnings);
            // The list is 340 KB: read an item at a time, the window never holds it.
            assert!(most < 32 * 1024, "a {window}-byte window held {most} bytes of a {}-byte list", bytes.len());
        }
        // Read whole when small enough, it takes the list's size.
        let (out, _, most) = read_windowed_large(Path::new("pods.json"), bytes, 4096, usize::MAX);
        assert_eq!(out, whole);
        assert!(most > 300 * 1024, "{most}");
        // A large object that is not a List, and a List that does not parse, are read whole,
        // with the same errors.
        let not_a_list = format!("{{\"apiVersion\":\"v1\",\"items\":[1,2,3],\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"c\"}},\"data\":{{\"x\":\"{}\"}}}}\n", "z".repeat(20_000));
        let cut = &bytes[..bytes.len() / 2];
        for (name, input) in [("cm.json", not_a_list.as_bytes()), ("cut.json", cut)] {
            let mut d = Diagnostics::new();
            let whole = read_objects(Path::new(name), input, MTIME, &mut d);
            let (out, diags, _) = read_windowed_large(Path::new(name), input, 512, 8 * 1024);
            assert_eq!(out, whole, "{name}");
            assert_eq!(diags.errors, d.errors, "{name}");
        }
    }

    /// The window a stream is read through changes nothing: the same versions, errors (with
    /// their offsets and lines) and warnings as reading the whole input at once.
    fn assert_window_changes_nothing(name: &str, bytes: &[u8], windows: &[usize]) {
        let path = Path::new(name);
        let mut whole_diags = Diagnostics::new();
        let whole = read_objects(path, bytes, MTIME, &mut whole_diags);
        for &window in windows {
            let (out, diags) = read_windowed(path, bytes, window);
            assert_eq!(out, whole, "{name}: versions through a {window}-byte window");
            assert_eq!(diags.errors, whole_diags.errors, "{name}: errors through a {window}-byte window");
            assert_eq!(diags.warnings, whole_diags.warnings, "{name}: warnings through a {window}-byte window");
            assert_eq!(diags.skipped, whole_diags.skipped, "{name}: skips through a {window}-byte window");
        }
    }

    #[test]
    fn a_window_reads_what_the_whole_file_holds() {
        let mut long = String::new();
        for i in 1..=400 {
            long.push_str(&match i % 50 {
                // A broken object, a value cut by the next line, a number at the top level.
                7 => "  {\"type\":\"MODIFIED\",\"object\":{]}\n".to_owned(),
                19 => "{\"type\":\"ADDED\",\"object\":{\"apiVersion\":\"v1\",\"kind\":\"Pod\"\n".to_owned(),
                31 => "1234567890123\n".to_owned(),
                // Numbers and literals a window can cut anywhere (`1.|25`, `2e|10`, `tr|ue`).
                43 => format!("{{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{{\"name\":\"d{i}\"}},\"x\":[1.25,2e10,-3.5E-2,0.0,true,false,null]}}\n"),
                _ => format!(
                    "{{\"type\":\"MODIFIED\",\"object\":{{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{{\"name\":\"n{i}\",\"creationTimestamp\":\"2026-11-0{}T00:00:00Z\"}}}}}}\n",
                    1 + i % 9
                ),
            });
        }
        let (out, d) = read_text("long.jsonl", &long);
        assert_eq!(out.len(), 400 - 3 * 8, "every good line is one version");
        assert_eq!(d.errors.len(), 3 * 8, "{:?}", error_types(&d));
        assert_window_changes_nothing("long.jsonl", long.as_bytes(), &[1, 2, 5, 17, 64, 333, 4096]);
        // A long stretch of garbage between two objects, and a value much longer than the window.
        let mut garbage = String::from("{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"a\"}}\n{x\n");
        garbage.push_str(&"not json at all, ".repeat(500));
        garbage.push_str("\n  \n   {\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"b\",\"annotations\":{\"x\":\"");
        garbage.push_str(&"y".repeat(20_000));
        garbage.push_str("\"}}}\n");
        let (out, d) = read_text("garbage.json", &garbage);
        assert_eq!(names(&out), ["a", "b"]);
        assert_eq!(error_types(&d), ["invalid_json"]);
        assert_window_changes_nothing("garbage.json", garbage.as_bytes(), &[1, 3, 100, 1000]);
        let rel = "k8s-pods-nodes-watch/watch-stream-pods-ndjson-2016-pending-to-running.jsonl";
        let bytes = std::fs::read(PathBuf::from(REAL).join(rel)).unwrap();
        assert_window_changes_nothing(rel, &bytes, &[1, 7, 256, 65536]);
    }

    /// Cut and corrupted versions of every fixture, read as JSON and as YAML: the reader must
    /// return (whatever it finds), never panic.
    #[test]
    fn never_panics_on_damaged_input() {
        let mut inputs: Vec<Vec<u8>> = [
            "",
            "{",
            "[",
            "\"",
            "}",
            "---",
            "---\n---\n",
            "...",
            "--- |\n  x\n",
            "*a",
            "&a [*a, *a]",
            "<<: 1",
            "a: &x {b: 1}\nc:\n  <<: *x\n",
            "%YAML 1.2\n---\na: 1\n",
            "? [a]\n: b\n",
            "{\"type\":\"ADDED\"}",
            "{\"type\":7,\"object\":{}}",
            "{\"type\":\"ERROR\",\"object\":3}",
            "{\"kind\":\"List\",\"items\":[[],null,{}]}",
            "!!binary aGVsbG8=",
            "1e999",
            "-",
            "\t{",
            "{\"a\":\"\\ud800\"}",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
        inputs.push(vec![b'['; 10_000]);
        inputs.push(b"a:\n".iter().copied().cycle().take(3000).collect());
        inputs.push((0..=255u8).collect());
        for dir in ["kueue", "k8s-events", "k8s-pods-nodes-watch"] {
            let Ok(entries) = std::fs::read_dir(PathBuf::from(REAL).join(dir)) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(bytes) = std::fs::read(entry.path()) else { continue };
                let step = (bytes.len() / 40).max(1);
                for cut in (0..bytes.len()).step_by(step) {
                    inputs.push(bytes[..cut].to_vec());
                    let mut flipped = bytes.clone();
                    flipped[cut] ^= 0x5d;
                    inputs.push(flipped);
                }
            }
        }
        for (k, input) in inputs.iter().enumerate() {
            for name in ["x.json", "x.yaml", "x"] {
                let mut d = Diagnostics::new();
                let out = read_objects(Path::new(name), input, MTIME, &mut d);
                assert!(out.iter().enumerate().all(|(i, v)| v.seq == i as i64));
            }
            // Damaged input read through a window finds what the whole input holds (one window
            // size per input, to keep the test quick).
            if is_json(Path::new("x"), input) {
                assert_window_changes_nothing("x.json", input, &[[1, 2, 9, 100][k % 4]]);
            }
        }
    }
}
