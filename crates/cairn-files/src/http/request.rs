//! What a request asks, beyond its method and path: the byte range
//! (RFC 9110 §14) and the preconditions (§13), each a pure function of the
//! header values and the object's validators, tested beside them; and the
//! path's percent-decoding.

use super::date::parse_http_date;

/// The validators of one object version: what `ETag` and `Last-Modified`
/// say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validators<'a> {
    /// The strong entity tag, quotes included.
    pub etag: &'a str,
    /// Last modification, whole seconds since the epoch.
    pub modified: u64,
}

/// The conditional headers of a request (raw values; absent = `None`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Conditions<'a> {
    /// `If-Match`.
    pub if_match: Option<&'a str>,
    /// `If-None-Match`.
    pub if_none_match: Option<&'a str>,
    /// `If-Modified-Since`.
    pub if_modified_since: Option<&'a str>,
    /// `If-Unmodified-Since`.
    pub if_unmodified_since: Option<&'a str>,
    /// `If-Range`.
    pub if_range: Option<&'a str>,
}

/// What the preconditions decide, for a GET or HEAD.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precondition {
    /// Go on with the request.
    Proceed,
    /// `304 Not Modified`.
    NotModified,
    /// `412 Precondition Failed`.
    Failed,
}

/// Whether an entity-tag list (`"a", W/"b"` or `*`) matches `etag`;
/// `weak`: weak comparison (a `W/` prefix is ignored), else strong (a weak
/// tag never matches).
fn tag_list_matches(list: &str, etag: &str, weak: bool) -> bool {
    list.split(',').map(str::trim).any(|tag| {
        if tag == "*" {
            return true;
        }
        match tag.strip_prefix("W/") {
            Some(tag) => weak && tag == etag,
            None => tag == etag,
        }
    })
}

impl Conditions<'_> {
    /// RFC 9110 §13.2.2's order: If-Match, else If-Unmodified-Since (412);
    /// then If-None-Match, else If-Modified-Since (304). An invalid date
    /// makes its header ignored.
    pub fn evaluate(&self, object: Validators<'_>) -> Precondition {
        if let Some(list) = self.if_match {
            if !tag_list_matches(list, object.etag, false) {
                return Precondition::Failed;
            }
        } else if let Some(since) = self.if_unmodified_since.and_then(parse_http_date)
            && object.modified > since
        {
            return Precondition::Failed;
        }
        if let Some(list) = self.if_none_match {
            if tag_list_matches(list, object.etag, true) {
                return Precondition::NotModified;
            }
        } else if let Some(since) = self.if_modified_since.and_then(parse_http_date)
            && object.modified <= since
        {
            return Precondition::NotModified;
        }
        Precondition::Proceed
    }

    /// Whether a `Range` may be honoured: no `If-Range`, or one that
    /// matches (a strong tag equal to ours, or our exact `Last-Modified`).
    pub fn range_allowed(&self, object: Validators<'_>) -> bool {
        match self.if_range.map(str::trim) {
            None => true,
            Some(tag) if tag.starts_with('"') => tag == object.etag,
            Some(tag) if tag.starts_with("W/") => false,
            Some(date) => parse_http_date(date) == Some(object.modified),
        }
    }
}

/// What a `Range` header asks of an object of a given size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RangeAnswer {
    /// No usable range (absent, invalid, another unit, or several ranges):
    /// the whole object, `200`.
    Whole,
    /// Bytes `start..end` (end exclusive), `206`.
    Part {
        /// First byte.
        start: u64,
        /// One past the last byte.
        end: u64,
    },
    /// A valid range that selects nothing, `416`.
    Unsatisfiable,
}

fn digits(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Answers `Range: bytes=a-b | a- | -n` for an object of `size` bytes.
pub fn parse_range(header: Option<&str>, size: u64) -> RangeAnswer {
    let Some(header) = header else {
        return RangeAnswer::Whole;
    };
    let header = header.trim();
    let Some(spec) = header
        .get(..6)
        .filter(|unit| unit.eq_ignore_ascii_case("bytes="))
        .map(|_| header[6..].trim())
    else {
        return RangeAnswer::Whole;
    };
    if spec.contains(',') {
        return RangeAnswer::Whole; // several ranges: we send the whole body
    }
    let Some((first, last)) = spec.split_once('-') else {
        return RangeAnswer::Whole;
    };
    let (first, last) = (first.trim(), last.trim());
    if first.is_empty() {
        let Some(suffix) = digits(last) else {
            return RangeAnswer::Whole;
        };
        if suffix == 0 || size == 0 {
            return RangeAnswer::Unsatisfiable;
        }
        return RangeAnswer::Part {
            start: size - suffix.min(size),
            end: size,
        };
    }
    let Some(start) = digits(first) else {
        return RangeAnswer::Whole;
    };
    let end = if last.is_empty() {
        u64::MAX
    } else {
        match digits(last) {
            Some(last) if last >= start => last.saturating_add(1),
            _ => return RangeAnswer::Whole, // invalid: ignored
        }
    };
    if start >= size {
        return RangeAnswer::Unsatisfiable;
    }
    RangeAnswer::Part {
        start,
        end: end.min(size),
    }
}

/// Percent-decodes `text` into `out` (cleared first). `None` if an escape is
/// malformed or the result is not UTF-8.
pub fn percent_decode(text: &str, out: &mut String) -> Option<()> {
    out.clear();
    let bytes = text.as_bytes();
    let mut decoded = std::mem::take(out).into_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let value = u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?;
            decoded.push(value);
            i += 3;
        } else {
            decoded.push(bytes[i]);
            i += 1;
        }
    }
    match String::from_utf8(decoded) {
        Ok(text) => {
            *out = text;
            Some(())
        }
        Err(e) => {
            let mut bytes = e.into_bytes();
            bytes.clear();
            *out = String::from_utf8(bytes).unwrap_or_default();
            None
        }
    }
}

/// The value of `name` in a query string (`a=1&b=2`), percent-decoded;
/// `Some("")` for a bare `name`; `None` if absent or malformed.
pub fn query_value(query: &str, name: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| {
            let mut out = String::new();
            percent_decode(value, &mut out).map(|()| out)
        })?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECT: Validators<'static> = Validators {
        etag: "\"64-5f5e100\"",
        modified: 784_111_777,
    };
    const BEFORE: &str = "Sun, 06 Nov 1994 08:49:36 GMT";
    const AT: &str = "Sun, 06 Nov 1994 08:49:37 GMT";

    #[test]
    fn ranges_follow_rfc_9110() {
        use RangeAnswer::{Part, Unsatisfiable, Whole};
        let cases = [
            (None, 100, Whole),
            (Some("bytes=0-9"), 100, Part { start: 0, end: 10 }),
            (
                Some("bytes=90-"),
                100,
                Part {
                    start: 90,
                    end: 100,
                },
            ),
            (
                Some("bytes=-10"),
                100,
                Part {
                    start: 90,
                    end: 100,
                },
            ),
            (Some("bytes=-500"), 100, Part { start: 0, end: 100 }),
            (
                Some("bytes=50-1000"),
                100,
                Part {
                    start: 50,
                    end: 100,
                },
            ),
            (Some("BYTES=1-1"), 100, Part { start: 1, end: 2 }),
            (
                Some("bytes=99-99"),
                100,
                Part {
                    start: 99,
                    end: 100,
                },
            ),
            (Some("bytes=100-"), 100, Unsatisfiable),
            (Some("bytes=100-200"), 100, Unsatisfiable),
            (Some("bytes=-0"), 100, Unsatisfiable),
            (Some("bytes=0-"), 0, Unsatisfiable),
            (Some("bytes=-5"), 0, Unsatisfiable),
            (Some("bytes=9-3"), 100, Whole),
            (Some("bytes=0-1,5-6"), 100, Whole),
            (Some("items=0-1"), 100, Whole),
            (Some("bytes=a-b"), 100, Whole),
            (Some("bytes=-"), 100, Whole),
            (Some("bytes=+1-2"), 100, Whole),
            (Some("bytes=18446744073709551615-"), 100, Unsatisfiable),
            (
                Some("bytes=0-18446744073709551615"),
                100,
                Part { start: 0, end: 100 },
            ),
            (Some("bytes=99999999999999999999-"), 100, Whole),
        ];
        for (header, size, expected) in cases {
            assert_eq!(parse_range(header, size), expected, "{header:?} of {size}");
        }
    }

    #[test]
    fn preconditions_in_rfc_9110_order() {
        use Precondition::{Failed, NotModified, Proceed};
        let c = |m, nm, ms, us| Conditions {
            if_match: m,
            if_none_match: nm,
            if_modified_since: ms,
            if_unmodified_since: us,
            if_range: None,
        };
        let tag = Some("\"64-5f5e100\"");
        let other = Some("\"65-1\"");
        let cases = [
            (c(None, None, None, None), Proceed),
            (c(tag, None, None, None), Proceed),
            (c(Some("*"), None, None, None), Proceed),
            (c(other, None, None, None), Failed),
            (c(Some("W/\"64-5f5e100\""), None, None, None), Failed),
            (c(None, tag, None, None), NotModified),
            (c(None, Some("W/\"64-5f5e100\""), None, None), NotModified),
            (
                c(None, Some("\"x\", \"64-5f5e100\""), None, None),
                NotModified,
            ),
            (c(None, Some("*"), None, None), NotModified),
            (c(None, other, None, None), Proceed),
            (c(None, None, Some(AT), None), NotModified),
            (c(None, None, Some(BEFORE), None), Proceed),
            (c(None, None, Some("yesterday"), None), Proceed),
            (c(None, None, None, Some(BEFORE)), Failed),
            (c(None, None, None, Some(AT)), Proceed),
            // If-Match wins over If-Unmodified-Since.
            (c(tag, None, None, Some(BEFORE)), Proceed),
            // If-None-Match wins over If-Modified-Since.
            (c(None, other, Some(AT), None), Proceed),
            // 412 before 304.
            (c(other, tag, None, None), Failed),
        ];
        for (i, (conditions, expected)) in cases.iter().enumerate() {
            assert_eq!(
                conditions.evaluate(OBJECT),
                *expected,
                "case {i}: {conditions:?}"
            );
        }
    }

    #[test]
    fn if_range_needs_a_strong_tag_or_the_exact_date() {
        let allowed = |value| {
            Conditions {
                if_range: value,
                ..Conditions::default()
            }
            .range_allowed(OBJECT)
        };
        assert!(allowed(None));
        assert!(allowed(Some("\"64-5f5e100\"")));
        assert!(!allowed(Some("W/\"64-5f5e100\"")));
        assert!(!allowed(Some("\"other\"")));
        assert!(allowed(Some(AT)));
        assert!(!allowed(Some(BEFORE)));
        assert!(!allowed(Some("garbage")));
    }

    #[test]
    fn paths_and_queries_decode() {
        let mut out = String::from("left over");
        percent_decode("/b/a%20b/%C3%A9", &mut out).expect("valid");
        assert_eq!(out, "/b/a b/é");
        assert!(percent_decode("/b/%zz", &mut out).is_none());
        assert!(percent_decode("/b/%4", &mut out).is_none());
        assert!(percent_decode("/b/%ff", &mut out).is_none(), "not UTF-8");
        assert_eq!(
            query_value("list-type=2&prefix=a%2Fb", "prefix").as_deref(),
            Some("a/b")
        );
        assert_eq!(
            query_value("list-type=2&prefix", "prefix").as_deref(),
            Some("")
        );
        assert_eq!(query_value("list-type=2", "prefix"), None);
    }
}
