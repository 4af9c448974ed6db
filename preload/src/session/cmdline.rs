//! The command line stored in the trace header, with secrets taken out.
//!
//! Training jobs take credentials on the command line (`--hf-token=…`, `--wandb-key …`,
//! `env AWS_SECRET_ACCESS_KEY=… python …`), and traces get copied around. So the value of every
//! option or `NAME=value` pair whose name looks like a credential is replaced by
//! [`REDACTED`], in both `--name=value` and `--name value` forms, as is the password of a URL
//! (`https://user:pw@host`). Names are split into words at `-`, `_`, `.` and case changes are
//! ignored; a name is a credential when one of its words is one of [`SECRET_WORDS`] or ends with
//! one of [`SECRET_ENDINGS`] (`hf-token`, `HF_TOKEN`, `apikey`, `db.password`, `client_secret`).
//! Redacting a value that was not a secret costs a little context; storing one that was is a
//! leak, so the test is broad. `VRAMTRACE_STORE_CMDLINE=0` stores no command line at all.

/// What a redacted value becomes.
pub const REDACTED: &str = "<redacted>";

/// Words that make a name a credential's.
const SECRET_WORDS: &[&str] = &[
    "token",
    "tokens",
    "key",
    "keys",
    "password",
    "passwd",
    "pass",
    "pwd",
    "passphrase",
    "secret",
    "secrets",
    "auth",
    "authorization",
    "bearer",
    "credential",
    "credentials",
    "creds",
    "cookie",
];

/// Endings that make a run-together word a credential's (`hftoken`, `apikey`); "key" alone is
/// not one (`monkey`, `hockey`).
const SECRET_ENDINGS: &[&str] = &[
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "credentials",
    "apikey",
    "accesskey",
    "privatekey",
    "secretkey",
    "authkey",
];

/// Whether an option or variable name names a credential.
pub fn is_secret_name(name: &str) -> bool {
    name.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .any(|w| {
            SECRET_WORDS.contains(&w.as_str()) || SECRET_ENDINGS.iter().any(|s| w.ends_with(s))
        })
}

/// `--name`, `-name` → `name`; anything else → `None`.
fn option_name(arg: &str) -> Option<&str> {
    let name = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-'))?;
    (!name.is_empty() && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic()))
        .then_some(name)
}

/// A `NAME=value` pair (an environment assignment, a Hydra-style override) → its name.
fn pair_name(arg: &str) -> Option<&str> {
    let (name, _) = arg.split_once('=')?;
    let name = name.trim_start_matches('+');
    (!name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')))
    .then_some(name)
}

/// `scheme://user:password@host…` → `scheme://user:<redacted>@host…`.
fn redact_url_password(arg: &str) -> Option<String> {
    let start = arg.find("://")? + 3;
    let rest = &arg[start..];
    let at = rest.find('@')?;
    let userinfo = &rest[..at];
    if userinfo.contains('/') {
        return None;
    }
    let colon = userinfo.find(':')?;
    Some(format!(
        "{}{}:{REDACTED}{}",
        &arg[..start],
        &userinfo[..colon],
        &rest[at..]
    ))
}

/// The command line with secrets redacted (see the module doc).
pub fn redact(args: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(args.len());
    let mut value_next = false;
    for arg in args {
        if value_next {
            value_next = false;
            if !arg.starts_with('-') {
                out.push(REDACTED.to_string());
                continue;
            }
        }
        if let Some(name) = option_name(arg) {
            match name.split_once('=') {
                Some((n, _)) if is_secret_name(n) => {
                    let prefix = &arg[..arg.len() - name.len()];
                    out.push(format!("{prefix}{n}={REDACTED}"));
                }
                Some(_) => out.push(redact_url_password(arg).unwrap_or_else(|| arg.clone())),
                None => {
                    value_next = is_secret_name(name);
                    out.push(arg.clone());
                }
            }
            continue;
        }
        if let Some(name) = pair_name(arg) {
            if is_secret_name(name) {
                out.push(format!("{}={REDACTED}", &arg[..arg.find('=').unwrap_or(0)]));
                continue;
            }
        }
        out.push(redact_url_password(arg).unwrap_or_else(|| arg.clone()));
    }
    out
}

/// This process's command line as `/proc/self/cmdline` has it, redacted.
pub fn current() -> Vec<String> {
    let args: Vec<String> = std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    redact(&args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(args: &[&str]) -> Vec<String> {
        redact(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn both_option_forms_are_redacted() {
        assert_eq!(
            r(&["python", "train.py", "--hf-token=hf_abc", "--epochs", "3"]),
            [
                "python",
                "train.py",
                "--hf-token=<redacted>",
                "--epochs",
                "3"
            ]
        );
        assert_eq!(
            r(&["train", "--hf-token", "hf_abc", "--lr", "0.1"]),
            ["train", "--hf-token", "<redacted>", "--lr", "0.1"]
        );
        assert_eq!(
            r(&[
                "x",
                "-api_key",
                "k1",
                "--wandb-api-key=k2",
                "--password",
                "p"
            ]),
            [
                "x",
                "-api_key",
                "<redacted>",
                "--wandb-api-key=<redacted>",
                "--password",
                "<redacted>"
            ]
        );
        // A secret option followed by another option has no value to hide.
        assert_eq!(
            r(&["x", "--use-auth", "--verbose"]),
            ["x", "--use-auth", "--verbose"]
        );
    }

    #[test]
    fn pairs_and_urls_are_redacted() {
        assert_eq!(
            r(&[
                "env",
                "HF_TOKEN=abc",
                "AWS_SECRET_ACCESS_KEY=xyz",
                "OMP_NUM_THREADS=4",
                "db.password=pw",
                "+client_secret=s",
            ]),
            [
                "env",
                "HF_TOKEN=<redacted>",
                "AWS_SECRET_ACCESS_KEY=<redacted>",
                "OMP_NUM_THREADS=4",
                "db.password=<redacted>",
                "+client_secret=<redacted>"
            ]
        );
        assert_eq!(
            r(&[
                "git",
                "clone",
                "https://me:pat123@github.com/x/y",
                "--mirror=s3://u:pw@b/p"
            ]),
            [
                "git",
                "clone",
                "https://me:<redacted>@github.com/x/y",
                "--mirror=s3://u:<redacted>@b/p"
            ]
        );
    }

    #[test]
    fn ordinary_names_are_kept() {
        for name in [
            "epochs",
            "batch-size",
            "keyboard",
            "monkey_patch",
            "author",
            "passes",
            "compass",
            "output",
            "bypass",
        ] {
            assert!(!is_secret_name(name), "{name}");
        }
        for name in [
            "hf-token",
            "HF_TOKEN",
            "apikey",
            "api-key",
            "ACCESS_KEY",
            "secret",
            "AUTH",
            "pwd",
            "hftoken",
            "credentials",
            "wandb.api_key",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        assert_eq!(
            r(&[
                "python",
                "-m",
                "torch.distributed.run",
                "--nproc_per_node=8",
                "train.py"
            ]),
            [
                "python",
                "-m",
                "torch.distributed.run",
                "--nproc_per_node=8",
                "train.py"
            ]
        );
    }
}
