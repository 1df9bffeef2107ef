//! Splits a URI into its scheme and the rest. The core knows nothing else about addresses: each transport
//! parses the rest itself.

use crate::error::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uri {
    pub scheme: String,
    /// Everything after `scheme://`, for the transport to parse.
    pub rest: String,
}

impl Uri {
    pub fn parse(text: &str) -> Result<Uri> {
        let Some((scheme, rest)) = text.split_once("://") else {
            return Err(Error::Address(format!("{text:?} has no scheme (expected e.g. ipc://name)")));
        };
        let valid = scheme.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
            && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
        if !valid {
            return Err(Error::Address(format!("{text:?} has an invalid scheme {scheme:?}")));
        }
        if text.chars().any(|c| c.is_control()) {
            return Err(Error::Address(format!("{text:?} contains control characters")));
        }
        Ok(Uri { scheme: scheme.to_ascii_lowercase(), rest: rest.to_string() })
    }
}

impl std::fmt::Display for Uri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme, self.rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_refuses() {
        assert_eq!(Uri::parse("IPC://a/b").unwrap(), Uri { scheme: "ipc".into(), rest: "a/b".into() });
        for bad in ["", "ipc:/x", "://x", "1pc://x", "i p://x", "ipc://a\nb"] {
            assert!(matches!(Uri::parse(bad), Err(Error::Address(_))), "{bad:?}");
        }
    }
}
