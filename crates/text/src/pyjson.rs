//! The `tojson` filter as transformers defines it for chat templates
//! (`json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)`,
//! transformers `utils/chat_template_utils.py`): `", "` and `": "` between items (`","` and
//! `": "` with an indent), non-ASCII written as is, nothing HTML-escaped — where minijinja's own
//! filter writes compact JSON with `<`, `>`, `&` and `'` escaped, which would change every
//! prompt that shows a tool's schema.

use minijinja::value::{Kwargs, Value};
use minijinja::{Error, ErrorKind};
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};

/// `value | tojson(indent=None, separators=None, sort_keys=False)`.
pub(crate) fn tojson(value: &Value, indent: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let indent = match indent {
        Some(i) => Some(i),
        None => kwargs.get::<Option<Value>>("indent")?,
    };
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let err = |e: serde_json::Error| Error::new(ErrorKind::InvalidOperation, "cannot serialize to JSON").with_source(e);
    let mut json = serde_json::to_value(value).map_err(err)?;
    if sort_keys == Some(true) {
        json = sorted(json);
    }
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(usize::try_from(v)?),
    };
    let (item, key) = match separators.as_deref() {
        Some([item, key]) => (item.clone(), key.clone()),
        Some(_) => return Err(Error::new(ErrorKind::InvalidOperation, "tojson: separators must be a pair")),
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let mut out = Vec::new();
    match indent {
        Some(n) => {
            let spaces = " ".repeat(n);
            let f = Python { inner: PrettyFormatter::with_indent(spaces.as_bytes()), item, key, pretty: true };
            serde::Serialize::serialize(&json, &mut serde_json::Serializer::with_formatter(&mut out, f))
                .map_err(err)?;
        }
        None => {
            let f = Python { inner: CompactFormatter, item, key, pretty: false };
            serde::Serialize::serialize(&json, &mut serde_json::Serializer::with_formatter(&mut out, f))
                .map_err(err)?;
        }
    }
    let text = String::from_utf8(out)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, "tojson wrote invalid UTF-8").with_source(e))?;
    Ok(Value::from_safe_string(text))
}

fn sorted(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => {
            let mut entries: Vec<_> = m.into_iter().map(|(k, v)| (k, sorted(v))).collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(entries.into_iter().collect())
        }
        serde_json::Value::Array(a) => serde_json::Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// A formatter with Python's separators: `item` between entries, `key` after a key; the
/// pretty one puts newlines and indentation around them as `json.dumps(indent=n)` does.
struct Python<F> {
    inner: F,
    item: String,
    key: String,
    pretty: bool,
}

impl<F: Formatter> Formatter for Python<F> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.begin_array(w)
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.end_array(w)
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(self.item.as_bytes())?;
        }
        // The newline and indentation of the pretty formatter (as for a first item: no comma).
        if self.pretty {
            self.inner.begin_array_value(w, true)?;
        }
        Ok(())
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.end_array_value(w)
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.begin_object(w)
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.end_object(w)
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(self.item.as_bytes())?;
        }
        if self.pretty {
            self.inner.begin_object_key(w, true)?;
        }
        Ok(())
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(self.key.as_bytes())
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.inner.end_object_value(w)
    }
}

#[cfg(test)]
mod tests {
    fn render(src: &str, v: serde_json::Value) -> String {
        let t = crate::ChatTemplate::new(src, None, None).unwrap();
        let mut m = crate::Message::text("user", "x");
        m.extra.insert("v".into(), v);
        t.render(&[m], false).unwrap()
    }

    #[test]
    fn tojson_writes_what_python_json_dumps_writes() {
        let v = serde_json::json!({"b": [1, "é<&>'"], "a": {}, "c": []});
        // json.dumps(v, ensure_ascii=False) and json.dumps(v, ensure_ascii=False, indent=2)
        assert_eq!(render("{{ messages[0].v | tojson }}", v.clone()), r#"{"b": [1, "é<&>'"], "a": {}, "c": []}"#);
        assert_eq!(
            render("{{ messages[0].v | tojson(indent=2) }}", v.clone()),
            "{\n  \"b\": [\n    1,\n    \"é<&>'\"\n  ],\n  \"a\": {},\n  \"c\": []\n}"
        );
        assert_eq!(
            render("{{ messages[0].v | tojson(sort_keys=true) }}", v),
            r#"{"a": {}, "b": [1, "é<&>'"], "c": []}"#
        );
    }
}
