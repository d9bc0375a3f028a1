//! Human-friendly sizes (`64M`) and durations (`1500ms`), shared by the CLI and YAML.

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// A size in bytes. Suffixes are binary: `K`/`KiB` = 1024, `M` = 1024², `G`, `T`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Size(pub u64);

impl FromStr for Size {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("'{text}' is not a size; use e.g. 64M, 1G, 512K or a byte count");
        let text_trimmed = text.trim();
        let split = text_trimmed
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text_trimmed.len());
        let (digits, unit) = text_trimmed.split_at(split);
        let number: u64 = digits.parse().map_err(|_| bad())?;
        let shift = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "b" => 0,
            "k" | "kb" | "kib" => 10,
            "m" | "mb" | "mib" => 20,
            "g" | "gb" | "gib" => 30,
            "t" | "tb" | "tib" => 40,
            _ => return Err(bad()),
        };
        number
            .checked_mul(1u64 << shift)
            .map(Size)
            .ok_or_else(|| format!("'{text}' is too large"))
    }
}

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = [(40, "T"), (30, "G"), (20, "M"), (10, "K")];
        for (shift, suffix) in units {
            if self.0 != 0 && self.0.is_multiple_of(1u64 << shift) {
                return write!(f, "{}{}", self.0 >> shift, suffix);
            }
        }
        write!(f, "{}", self.0)
    }
}

/// A wall-clock or CPU duration: `5s`, `1500ms`, `2m`, `1h`, `2.5s`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Span(pub Duration);

impl FromStr for Span {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("'{text}' is not a duration; use e.g. 5s, 1500ms, 2m or 1h");
        let trimmed = text.trim();
        let split = trimmed
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let (number, unit) = trimmed.split_at(split);
        let value: f64 = number.parse().map_err(|_| bad())?;
        let seconds_per_unit = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" | "min" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        let seconds = value * seconds_per_unit;
        if !seconds.is_finite() || seconds > 1e9 {
            return Err(format!("'{text}' is too long"));
        }
        Ok(Span(Duration::from_secs_f64(seconds)))
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let millis = self.0.as_millis();
        if millis.is_multiple_of(1000) {
            write!(f, "{}s", millis / 1000)
        } else {
            write!(f, "{millis}ms")
        }
    }
}

/// Both types are written as strings in YAML; a bare integer is accepted for sizes.
macro_rules! serde_via_str {
    ($type:ty) => {
        impl<'de> Deserialize<'de> for $type {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl de::Visitor<'_> for Visitor {
                    type Value = $type;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a string such as 64M or 5s")
                    }
                    fn visit_str<E: de::Error>(self, text: &str) -> Result<$type, E> {
                        text.parse().map_err(E::custom)
                    }
                    fn visit_u64<E: de::Error>(self, number: u64) -> Result<$type, E> {
                        number.to_string().parse().map_err(E::custom)
                    }
                    fn visit_i64<E: de::Error>(self, number: i64) -> Result<$type, E> {
                        number.to_string().parse().map_err(E::custom)
                    }
                    fn visit_f64<E: de::Error>(self, number: f64) -> Result<$type, E> {
                        number.to_string().parse().map_err(E::custom)
                    }
                }
                deserializer.deserialize_any(Visitor)
            }
        }
        impl Serialize for $type {
            fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.collect_str(self)
            }
        }
    };
}
serde_via_str!(Size);
serde_via_str!(Span);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!("64M".parse::<Size>().unwrap(), Size(64 << 20));
        assert_eq!("64MiB".parse::<Size>().unwrap(), Size(64 << 20));
        assert_eq!("1g".parse::<Size>().unwrap(), Size(1 << 30));
        assert_eq!("512K".parse::<Size>().unwrap(), Size(512 << 10));
        assert_eq!("4096".parse::<Size>().unwrap(), Size(4096));
        for bad in ["", "M", "-1M", "1.5G", "12X", "99999999999T"] {
            assert!(bad.parse::<Size>().is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn sizes_print_in_the_largest_exact_unit() {
        assert_eq!(Size(64 << 20).to_string(), "64M");
        assert_eq!(Size(1536).to_string(), "1536");
        assert_eq!(Size(3 << 10).to_string(), "3K");
    }

    #[test]
    fn limits_take_max_for_none() {
        assert_eq!("max".parse::<Limit<Size>>().unwrap(), Limit::Max);
        assert_eq!(
            "64M".parse::<Limit<Size>>().unwrap(),
            Limit::To(Size(64 << 20))
        );
        assert_eq!("12".parse::<Limit<Count>>().unwrap(), Limit::To(Count(12)));
        assert!("-1".parse::<Limit<Count>>().is_err());
        assert!("lots".parse::<Limit<Size>>().unwrap_err().contains("max"));
    }

    #[test]
    fn durations_parse_with_units() {
        assert_eq!("5s".parse::<Span>().unwrap().0, Duration::from_secs(5));
        assert_eq!(
            "1500ms".parse::<Span>().unwrap().0,
            Duration::from_millis(1500)
        );
        assert_eq!("2m".parse::<Span>().unwrap().0, Duration::from_secs(120));
        assert_eq!(
            "2.5s".parse::<Span>().unwrap().0,
            Duration::from_millis(2500)
        );
        for bad in ["5", "s", "5x", "-1s", "1e3s", ""] {
            assert!(bad.parse::<Span>().is_err(), "{bad} should be rejected");
        }
    }
}

/// A limit that can also be switched off with `max` (cgroup v2's word for "no limit").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit<T> {
    Max,
    To(T),
}

impl<T> Limit<T> {
    pub fn value(self) -> Option<T> {
        match self {
            Limit::Max => None,
            Limit::To(value) => Some(value),
        }
    }
}

impl<T: FromStr<Err = String>> FromStr for Limit<T> {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "max" => Ok(Limit::Max),
            other => other
                .parse()
                .map(Limit::To)
                .map_err(|why| format!("{why}, or max for no limit")),
        }
    }
}

impl<T: fmt::Display> fmt::Display for Limit<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Max => f.write_str("max"),
            Limit::To(value) => value.fmt(f),
        }
    }
}

/// A count such as a number of processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Count(pub u64);

impl FromStr for Count {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        text.trim()
            .parse()
            .map(Count)
            .map_err(|_| format!("'{text}' is not a whole number"))
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

serde_via_str!(Limit<Size>);
serde_via_str!(Limit<Count>);
