//! On/off settings (`VRAMTRACE_DISABLE`, `VRAMTRACE_ALERT`, …): `1`, `true`, `yes`, `on`, or
//! `0`, `false`, `no`, `off` and the empty value, in any case.

/// Parses an on/off value.
pub fn parse_switch(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" | "" => Ok(false),
        _ => Err("not a boolean (use 1 or 0)".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switches_read_either_way() {
        assert_eq!(parse_switch("Yes"), Ok(true));
        assert_eq!(parse_switch(" off "), Ok(false));
        assert_eq!(parse_switch(""), Ok(false));
        assert!(parse_switch("maybe").is_err());
    }
}
