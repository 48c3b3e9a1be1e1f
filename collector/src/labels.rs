//! Label sets as stored: JSON objects with sorted keys, so that equal label sets are equal text
//! (the dedup key and SQL `=` rely on it) and every reader can parse them.

/// Writes `{"k":"v",...}` for pairs already sorted by key. Keys and values are JSON-escaped.
pub fn to_json<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::with_capacity(64);
    out.push('{');
    let mut first = true;
    for (k, v) in pairs {
        if !first {
            out.push(',');
        }
        first = false;
        push_json_string(&mut out, k);
        out.push(':');
        push_json_string(&mut out, v);
    }
    out.push('}');
    out
}

/// Appends `s` as a JSON string literal.
pub fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_round_trips_through_serde_json() {
        let s = to_json([("a", "x\"y"), ("b", "c,d=e}"), ("c", "line\nbreak\\")]);
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v["a"], "x\"y");
        assert_eq!(v["b"], "c,d=e}");
        assert_eq!(v["c"], "line\nbreak\\");
        assert_eq!(to_json([]), "{}");
    }
}
