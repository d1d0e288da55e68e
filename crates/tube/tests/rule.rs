//! `TubeName::new` against a plain statement of beanstalkd's rule, on arbitrary strings.

use proptest::prelude::*;
use tickwheel_tube::{TubeName, MAX_TUBE_NAME};

/// beanstalkd's `NAME_CHARS` and its checks in `is_valid_tube`, written out directly.
fn model_accepts(name: &str) -> bool {
    const NAME_CHARS: &str =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-+/;.$_()";
    !name.is_empty()
        && name.len() <= MAX_TUBE_NAME
        && !name.starts_with('-')
        && name.chars().all(|c| NAME_CHARS.contains(c))
}

proptest! {
    #[test]
    fn accepts_exactly_the_rule(name in "[-+/;.$_()a-zA-Z0-9 \u{e9}\\x00]{0,210}") {
        let got = TubeName::new(&name);
        prop_assert_eq!(got.is_ok(), model_accepts(&name));
        if let Ok(tube) = got {
            prop_assert_eq!(tube.as_str(), name.as_str());
            prop_assert_eq!(tube.to_string(), name);
        }
    }
}

#[test]
fn edges() {
    assert!(TubeName::new(&"a".repeat(MAX_TUBE_NAME)).is_ok());
    assert!(TubeName::new(&"a".repeat(MAX_TUBE_NAME + 1)).is_err());
    assert!(TubeName::new("").is_err());
    assert!(TubeName::new("-a").is_err());
    assert!(TubeName::new("a-").is_ok());
    assert_eq!(TubeName::default_tube().as_str(), "default");
}
