//! Counts: whole numbers of things (orphans, steps, frames, events), and the ranges the
//! settings allow them in.

/// A range a count setting must fall in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CountRange {
    pub lo: u64,
    pub hi: u64,
}

/// Frames per stack (`VRAMTRACE_STACK_DEPTH`, `VRAMTRACE_PYTHON_DEPTH`, `run --stack-depth`,
/// `--python-depth`); 0 turns that stack off.
pub const FRAMES: CountRange = CountRange { lo: 0, hi: 256 };

/// `1930` as `1,930`.
pub fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Parses a count: a whole number (`0`, `12`, `10000`).
pub fn parse_count(text: &str) -> Result<u64, String> {
    text.trim()
        .parse()
        .map_err(|_| "not a whole number".to_string())
}

impl CountRange {
    /// Parses a count that must fall in this range.
    pub fn parse(self, text: &str) -> Result<u64, String> {
        match parse_count(text) {
            Ok(n) if (self.lo..=self.hi).contains(&n) => Ok(n),
            _ => Err(format!("not a number from {} to {}", self.lo, self.hi)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_whole_numbers_in_their_range() {
        assert_eq!(parse_count(" 12 "), Ok(12));
        assert_eq!(parse_count("x"), Err("not a whole number".into()));
        assert!(parse_count("-1").is_err() && parse_count("1.5").is_err());
        assert_eq!(FRAMES.parse("256"), Ok(256));
        assert_eq!(
            FRAMES.parse("99999"),
            Err("not a number from 0 to 256".into())
        );
    }
}
