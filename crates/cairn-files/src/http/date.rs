//! HTTP dates (RFC 9110 §5.6.7: IMF-fixdate, `Sun, 06 Nov 1994 08:49:37
//! GMT`) and the ISO 8601 times S3 listings carry, without a date crate.
//! Only IMF-fixdate is parsed; a date in the two obsolete formats is treated
//! as invalid, and an invalid date in a conditional header makes the header
//! ignored, as RFC 9110 says.

use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Whole seconds since the epoch (times before it count as 0).
pub fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// (year, month 1–12, day 1–31) of a day count since 1970-01-01
/// (Howard Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Days since 1970-01-01 of a civil date (`days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Writes `seconds` (since the epoch) as an IMF-fixdate.
pub fn write_http_date(out: &mut Vec<u8>, seconds: u64) {
    let days = (seconds / 86_400) as i64;
    let (year, month, day) = civil(days);
    let rest = seconds % 86_400;
    let _ = write!(
        out,
        "{}, {day:02} {} {year:04} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[month as usize - 1],
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    );
}

/// Writes `seconds` as ISO 8601 with milliseconds (`2009-10-12T17:50:30.000Z`).
pub fn write_iso8601(out: &mut String, seconds: u64) {
    use std::fmt::Write as _;
    let (year, month, day) = civil((seconds / 86_400) as i64);
    let rest = seconds % 86_400;
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.000Z",
        rest / 3600,
        rest / 60 % 60,
        rest % 60
    );
}

/// The value of a run of ASCII digits; `None` if any byte is not one.
fn decimal(digits: &[u8]) -> Option<u32> {
    digits.iter().all(u8::is_ascii_digit).then(|| {
        digits
            .iter()
            .fold(0u32, |n, d| n * 10 + u32::from(d - b'0'))
    })
}

/// Parses an IMF-fixdate into seconds since the epoch; `None` if it is not
/// one (or before 1970).
pub fn parse_http_date(text: &str) -> Option<u64> {
    let b = text.trim().as_bytes();
    // "Sun, 06 Nov 1994 08:49:37 GMT" is 29 bytes.
    if b.len() != 29 || &b[3..5] != b", " || b[7] != b' ' || b[11] != b' ' || b[16] != b' ' {
        return None;
    }
    if b[19] != b':' || b[22] != b':' || &b[25..] != b" GMT" {
        return None;
    }
    let number = |range: std::ops::Range<usize>| decimal(&b[range]);
    let day = number(5..7)?;
    let month = MONTHS.iter().position(|m| m.as_bytes() == &b[8..11])? as u32 + 1;
    let year = i64::from(number(12..16)?);
    let (hour, minute, second) = (number(17..19)?, number(20..22)?, number(23..25)?);
    if !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 || year < 1970 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    if civil(days) != (year, month, day) {
        return None; // 31 Feb and the like
    }
    Some(days as u64 * 86_400 + u64::from(hour) * 3600 + u64::from(minute) * 60 + u64::from(second))
}

/// Seconds since the epoch of an ISO 8601 UTC time as S3 listings give it,
/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z` (the fraction dropped); `None` if it
/// is not one.
pub fn parse_iso8601(text: &str) -> Option<u64> {
    let b = text.trim().as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let tail = &b[19..];
    let valid_tail = tail == b"Z"
        || (tail.len() > 2
            && tail[0] == b'.'
            && tail[tail.len() - 1] == b'Z'
            && tail[1..tail.len() - 1].iter().all(u8::is_ascii_digit));
    if !valid_tail {
        return None;
    }
    let number = |range: std::ops::Range<usize>| decimal(&b[range]);
    let year = i64::from(number(0..4)?);
    let (month, day) = (number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
        || year < 1970
    {
        return None;
    }
    let days = days_from_civil(year, month, day);
    if civil(days) != (year, month, day) {
        return None;
    }
    Some(days as u64 * 86_400 + u64::from(hour) * 3600 + u64::from(minute) * 60 + u64::from(second))
}

/// `seconds` since the epoch as a `SystemTime`.
pub fn from_unix_seconds(seconds: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_and_match_known_values() {
        let mut out = Vec::new();
        write_http_date(&mut out, 784_111_777);
        assert_eq!(out, b"Sun, 06 Nov 1994 08:49:37 GMT");
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        let mut iso = String::new();
        write_iso8601(&mut iso, 1_255_369_830);
        assert_eq!(iso, "2009-10-12T17:50:30.000Z");
        assert_eq!(parse_iso8601(&iso), Some(1_255_369_830));
        assert_eq!(parse_iso8601("2009-10-12T17:50:30Z"), Some(1_255_369_830));
        for bad in [
            "2009-02-30T00:00:00Z",
            "2009-10-12 17:50:30Z",
            "2009-10-12T17:50:30",
            "2009-10-12T17:50:30.Z",
        ] {
            assert_eq!(parse_iso8601(bad), None, "{bad}");
        }
        for seconds in [0, 86_399, 951_782_400, 4_107_542_399, 1_700_000_000] {
            let mut out = Vec::new();
            write_http_date(&mut out, seconds);
            let text = String::from_utf8(out).expect("ascii");
            assert_eq!(parse_http_date(&text), Some(seconds), "{text}");
        }
        for bad in [
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "Sun Nov  6 08:49:37 1994",
            "Sun, 31 Feb 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "",
        ] {
            assert_eq!(parse_http_date(bad), None, "{bad}");
        }
    }
}
