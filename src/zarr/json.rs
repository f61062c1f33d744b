//! Small typed accessors over `serde_json::Value` used by the metadata parsers.
//!
//! Each accessor takes the dotted path of the field it reads so that errors say
//! exactly which field was wrong (`codecs[0].configuration.chunk_shape`).
//! Keeping this in one place keeps the parsers short and makes the "wrong type
//! is an error, never a panic" rule uniform.

use serde_json::{Map, Value};

use crate::zarr::ZarrError;

/// The value as a JSON object.
pub(crate) fn object<'a>(v: &'a Value, field: &str) -> Result<&'a Map<String, Value>, ZarrError> {
    v.as_object()
        .ok_or_else(|| ZarrError::invalid(field, "must be a JSON object"))
}

/// A required member of an object.
pub(crate) fn required<'a>(obj: &'a Map<String, Value>, key: &str, field: &str) -> Result<&'a Value, ZarrError> {
    obj.get(key)
        .ok_or_else(|| ZarrError::invalid(field, "required field is missing"))
}

/// The value as a string.
pub(crate) fn string<'a>(v: &'a Value, field: &str) -> Result<&'a str, ZarrError> {
    v.as_str().ok_or_else(|| ZarrError::invalid(field, "must be a string"))
}

/// The value as a JSON array.
pub(crate) fn array<'a>(v: &'a Value, field: &str) -> Result<&'a [Value], ZarrError> {
    v.as_array()
        .map(Vec::as_slice)
        .ok_or_else(|| ZarrError::invalid(field, "must be a JSON array"))
}

/// The value as an array of non-negative integers that fit in `u64`.
pub(crate) fn u64_array(v: &Value, field: &str) -> Result<Vec<u64>, ZarrError> {
    array(v, field)?
        .iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_u64()
                .ok_or_else(|| ZarrError::invalid(format!("{field}[{i}]"), "must be a non-negative integer"))
        })
        .collect()
}

/// Like [`u64_array`], additionally requiring every entry to be positive.
pub(crate) fn positive_u64_array(v: &Value, field: &str) -> Result<Vec<u64>, ZarrError> {
    let dims = u64_array(v, field)?;
    if let Some(i) = dims.iter().position(|&d| d == 0) {
        return Err(ZarrError::invalid(format!("{field}[{i}]"), "must be greater than zero"));
    }
    Ok(dims)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn u64_array_rejects_negative_float_and_huge() {
        assert_eq!(u64_array(&json!([1, 2]), "s").unwrap(), vec![1, 2]);
        assert!(u64_array(&json!([1, -2]), "s").is_err());
        assert!(u64_array(&json!([1.5]), "s").is_err());
        assert!(u64_array(&json!([1.0]), "s").is_err());
        assert!(u64_array(&json!("12"), "s").is_err());
        assert!(u64_array(&json!([u64::MAX]), "s").is_ok());
    }

    #[test]
    fn positive_names_the_zero_entry() {
        let err = positive_u64_array(&json!([3, 0]), "chunk_shape").unwrap_err();
        assert_eq!(err, ZarrError::invalid("chunk_shape[1]", "must be greater than zero"));
    }

    #[test]
    fn required_and_object() {
        let v = json!({"a": 1});
        let o = object(&v, "doc").unwrap();
        assert!(required(o, "a", "a").is_ok());
        assert!(required(o, "b", "b").is_err());
        assert!(object(&json!([]), "doc").is_err());
        assert!(string(&json!(1), "n").is_err());
    }
}
