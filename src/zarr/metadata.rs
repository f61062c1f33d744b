//! Parsing of Zarr v3 `zarr.json` documents into typed metadata.
//!
//! The document is parsed once into a `serde_json::Value` (with key order
//! preserved) and then validated field by field. The typed view holds only
//! what zarrfs needs — shape, regular chunk grid, key encoding, codecs — while
//! `raw` keeps the whole document so the unsharded view can be written back
//! with every other field (attributes, dimension names, unknown extensions)
//! untouched. Validation is strict where a wrong value would make chunk
//! addressing meaningless (shape/chunk shape, grid, key encoding, codecs) and
//! absurd shapes whose element or chunk counts overflow `u64` are rejected up
//! front, so later arithmetic on validated metadata stays in range.

use serde_json::{Map, Value};

use crate::zarr::grid::{checked_product, grid_shape};
use crate::zarr::json;
use crate::zarr::key_encoding::ChunkKeyEncoding;
use crate::zarr::rectilinear::RectilinearGrid;
use crate::zarr::ZarrError;

/// One entry of a `codecs` list.
#[derive(Debug, Clone, PartialEq)]
pub struct CodecSpec {
    pub name: String,
    /// The `configuration` object, or `Null` when absent.
    pub configuration: Value,
    /// The codec's JSON exactly as stored (object or short-hand name string).
    pub raw: Value,
}

impl CodecSpec {
    /// Parse `{"name": .., "configuration"?: {..}, ..}` or a bare name string.
    pub fn from_json(v: &Value, field: &str) -> Result<Self, ZarrError> {
        let (name, configuration) = match v {
            Value::String(name) => (name.clone(), Value::Null),
            Value::Object(obj) => {
                let name_field = format!("{field}.name");
                let name = json::string(json::required(obj, "name", &name_field)?, &name_field)?;
                let configuration = match obj.get("configuration") {
                    None => Value::Null,
                    Some(c) => {
                        json::object(c, &format!("{field}.configuration"))?;
                        c.clone()
                    }
                };
                (name.to_owned(), configuration)
            }
            _ => return Err(ZarrError::invalid(field, "codec must be an object or a name string")),
        };
        if name.is_empty() {
            return Err(ZarrError::invalid(field, "codec name is empty"));
        }
        Ok(CodecSpec {
            name,
            configuration,
            raw: v.clone(),
        })
    }

    /// A member of the configuration object, if any.
    pub fn config(&self, key: &str) -> Option<&Value> {
        self.configuration.get(key)
    }
}

/// Parse a non-empty list of codecs found at `field`.
pub fn parse_codecs(v: &Value, field: &str) -> Result<Vec<CodecSpec>, ZarrError> {
    let items = json::array(v, field)?;
    if items.is_empty() {
        return Err(ZarrError::invalid(field, "codec list is empty"));
    }
    items
        .iter()
        .enumerate()
        .map(|(i, c)| CodecSpec::from_json(c, &format!("{field}[{i}]")))
        .collect()
}

/// A parsed `zarr.json`.
// Not boxed: the variant layout is part of the agreed API and values are
// short-lived (one per parsed document).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum NodeMetadata {
    Group { raw: Value },
    Array(ArrayMetadata),
}

/// The parts of array metadata zarrfs interprets, plus the raw document.
#[derive(Debug, Clone)]
pub struct ArrayMetadata {
    pub shape: Vec<u64>,
    pub data_type: Value,
    /// Regular chunk grid's chunk shape (the shard shape when sharded). For a rectilinear
    /// grid, the first chunk's edges: only [`rectilinear`](Self::rectilinear) describes it.
    pub chunk_shape: Vec<u64>,
    /// The chunk grid when it is `rectilinear` (`None`: regular).
    pub rectilinear: Option<RectilinearGrid>,
    pub chunk_key_encoding: ChunkKeyEncoding,
    pub codecs: Vec<CodecSpec>,
    pub fill_value: Value,
    /// Empty when absent.
    pub storage_transformers: Vec<Value>,
    /// The whole document as parsed, key order preserved.
    pub raw: Value,
}

impl ArrayMetadata {
    pub fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Number of chunks along each dimension of the stored chunk grid (of a rectilinear grid:
    /// those holding elements of the array).
    pub fn grid_shape(&self) -> Result<Vec<u64>, ZarrError> {
        match &self.rectilinear {
            Some(grid) => Ok(grid.grid_shape(&self.shape)),
            None => grid_shape(&self.shape, &self.chunk_shape),
        }
    }
}

/// Parse a Zarr v3 `zarr.json` (zarr_format must be 3, node_type "group" or "array").
pub fn parse_zarr_json(bytes: &[u8]) -> Result<NodeMetadata, ZarrError> {
    let raw: Value = serde_json::from_slice(bytes).map_err(|e| ZarrError::Json { reason: e.to_string() })?;
    parse_node(raw)
}

/// Parse an already decoded node document (an entry of a group's consolidated metadata).
pub fn parse_node(raw: Value) -> Result<NodeMetadata, ZarrError> {
    let doc = raw.as_object().ok_or_else(|| ZarrError::Json {
        reason: "top level is not a JSON object".into(),
    })?;
    match doc.get("zarr_format").and_then(Value::as_u64) {
        Some(3) => {}
        Some(n) => {
            return Err(ZarrError::unsupported(
                "zarr_format",
                format!("version {n}, only 3 is supported"),
            ))
        }
        None => return Err(ZarrError::invalid("zarr_format", "must be the integer 3")),
    }
    let node_type = json::string(json::required(doc, "node_type", "node_type")?, "node_type")?;
    match node_type {
        "group" => Ok(NodeMetadata::Group { raw }),
        "array" => Ok(NodeMetadata::Array(parse_array(doc, raw.clone())?)),
        other => Err(ZarrError::invalid(
            "node_type",
            format!("must be \"group\" or \"array\", got {other:?}"),
        )),
    }
}

fn parse_array(doc: &Map<String, Value>, raw: Value) -> Result<ArrayMetadata, ZarrError> {
    let shape = json::u64_array(json::required(doc, "shape", "shape")?, "shape")?;
    checked_product(&shape)?;

    let data_type = json::required(doc, "data_type", "data_type")?;
    if !(data_type.is_string() || data_type.is_object()) {
        return Err(ZarrError::invalid("data_type", "must be a name string or an object"));
    }

    let (chunk_shape, rectilinear) = parse_grid(json::required(doc, "chunk_grid", "chunk_grid")?, &shape)?;
    if chunk_shape.len() != shape.len() {
        return Err(ZarrError::invalid(
            "chunk_grid.configuration.chunk_shape",
            format!("has {} dimensions but shape has {}", chunk_shape.len(), shape.len()),
        ));
    }
    if rectilinear.is_none() {
        checked_product(&chunk_shape)?;
        checked_product(&grid_shape(&shape, &chunk_shape)?)?;
    }

    let chunk_key_encoding = match doc.get("chunk_key_encoding") {
        None => ChunkKeyEncoding::default(),
        Some(v) => ChunkKeyEncoding::from_json(v)?,
    };
    let codecs = parse_codecs(json::required(doc, "codecs", "codecs")?, "codecs")?;
    let fill_value = json::required(doc, "fill_value", "fill_value")?.clone();
    let storage_transformers = match doc.get("storage_transformers") {
        None => Vec::new(),
        Some(v) => json::array(v, "storage_transformers")?.to_vec(),
    };

    Ok(ArrayMetadata {
        shape,
        data_type: data_type.clone(),
        chunk_shape,
        rectilinear,
        chunk_key_encoding,
        codecs,
        fill_value,
        storage_transformers,
        raw,
    })
}

/// The chunk shape of a `regular` chunk grid, or the first edges and the whole grid of a
/// `rectilinear` one; other grids are `Unsupported`.
fn parse_grid(v: &Value, shape: &[u64]) -> Result<(Vec<u64>, Option<RectilinearGrid>), ZarrError> {
    let name = match v {
        Value::String(s) => s.as_str(),
        Value::Object(obj) => json::string(json::required(obj, "name", "chunk_grid.name")?, "chunk_grid.name")?,
        _ => return Err(ZarrError::invalid("chunk_grid", "must be an object")),
    };
    if name != "regular" && name != "rectilinear" {
        return Err(ZarrError::unsupported(
            "chunk_grid",
            format!("chunk grid {name:?}, only \"regular\" and \"rectilinear\" are supported"),
        ));
    }
    let config = match v.get("configuration") {
        Some(c) => json::object(c, "chunk_grid.configuration")?,
        None => {
            return Err(ZarrError::invalid(
                "chunk_grid.configuration",
                "required field is missing",
            ))
        }
    };
    if name == "rectilinear" {
        let grid = RectilinearGrid::from_configuration(&Value::Object(config.clone()), shape)?;
        return Ok((grid.first_edges(), Some(grid)));
    }
    let chunk_shape = json::positive_u64_array(
        json::required(config, "chunk_shape", "chunk_grid.configuration.chunk_shape")?,
        "chunk_grid.configuration.chunk_shape",
    )?;
    Ok((chunk_shape, None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zarr::key_encoding::Separator;
    use proptest::prelude::*;
    use serde_json::json;

    pub(crate) const ZARR_PYTHON_SHARDED: &str = r#"{"zarr_format":3,"node_type":"array","shape":[100,100],"data_type":"float32","chunk_grid":{"name":"regular","configuration":{"chunk_shape":[50,50]}},"chunk_key_encoding":{"name":"default","configuration":{"separator":"/"}},"fill_value":0.0,"codecs":[{"name":"sharding_indexed","configuration":{"chunk_shape":[10,10],"codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"zstd","configuration":{"level":0,"checksum":false}}],"index_codecs":[{"name":"bytes","configuration":{"endian":"little"}},{"name":"crc32c"}],"index_location":"end"}}],"attributes":{"a":1},"dimension_names":["y","x"],"storage_transformers":[]}"#;

    /// Shape of what tensorstore writes: v2 key encoding, blosc, extra keys.
    const TENSORSTORE: &str = r#"{
        "chunk_grid": {"configuration": {"chunk_shape": [64, 64, 3]}, "name": "regular"},
        "chunk_key_encoding": {"name": "v2", "configuration": {"separator": "."}},
        "codecs": [
            {"configuration": {"endian": "little"}, "name": "bytes"},
            {"configuration": {"blocksize": 0, "clevel": 5, "cname": "lz4", "shuffle": "shuffle", "typesize": 2}, "name": "blosc"}
        ],
        "data_type": "uint16",
        "dimension_names": ["y", "x", null],
        "fill_value": 0,
        "node_type": "array",
        "shape": [1000, 2000, 3],
        "zarr_format": 3
    }"#;

    fn array(text: &str) -> ArrayMetadata {
        match parse_zarr_json(text.as_bytes()).unwrap() {
            NodeMetadata::Array(a) => a,
            NodeMetadata::Group { .. } => panic!("expected an array"),
        }
    }

    fn with(field: &str, value: Value) -> Vec<u8> {
        let mut doc: Value = serde_json::from_str(ZARR_PYTHON_SHARDED).unwrap();
        doc[field] = value;
        serde_json::to_vec(&doc).unwrap()
    }

    fn without(field: &str) -> Vec<u8> {
        let mut doc: Value = serde_json::from_str(ZARR_PYTHON_SHARDED).unwrap();
        doc.as_object_mut().unwrap().remove(field);
        serde_json::to_vec(&doc).unwrap()
    }

    #[test]
    fn zarr_python_sharded_array() {
        let a = array(ZARR_PYTHON_SHARDED);
        assert_eq!(a.shape, vec![100, 100]);
        assert_eq!(a.ndim(), 2);
        assert_eq!(a.chunk_shape, vec![50, 50]);
        assert_eq!(a.data_type, json!("float32"));
        assert_eq!(a.fill_value, json!(0.0));
        assert_eq!(a.chunk_key_encoding, ChunkKeyEncoding::Default(Separator::Slash));
        assert_eq!(a.codecs.len(), 1);
        assert_eq!(a.codecs[0].name, "sharding_indexed");
        assert_eq!(a.codecs[0].config("chunk_shape"), Some(&json!([10, 10])));
        assert!(a.storage_transformers.is_empty());
        assert_eq!(a.grid_shape().unwrap(), vec![2, 2]);
        let keys: Vec<&str> = a.raw.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys[0], "zarr_format");
        assert_eq!(keys[keys.len() - 1], "storage_transformers");
    }

    #[test]
    fn tensorstore_array() {
        let a = array(TENSORSTORE);
        assert_eq!(a.shape, vec![1000, 2000, 3]);
        assert_eq!(a.chunk_shape, vec![64, 64, 3]);
        assert_eq!(a.chunk_key_encoding, ChunkKeyEncoding::V2(Separator::Dot));
        assert_eq!(a.codecs[1].name, "blosc");
        assert_eq!(a.codecs[1].config("cname"), Some(&json!("lz4")));
        assert_eq!(a.grid_shape().unwrap(), vec![16, 32, 1]);
    }

    #[test]
    fn group_and_defaults() {
        let g = parse_zarr_json(br#"{"zarr_format":3,"node_type":"group","attributes":{"x":[1]}}"#).unwrap();
        assert!(matches!(g, NodeMetadata::Group { raw } if raw["attributes"]["x"] == json!([1])));

        let a = parse_zarr_json(&without("chunk_key_encoding")).unwrap();
        let NodeMetadata::Array(a) = a else { panic!() };
        assert_eq!(a.chunk_key_encoding, ChunkKeyEncoding::default());
        assert_eq!(ChunkKeyEncoding::default(), ChunkKeyEncoding::Default(Separator::Slash));

        let NodeMetadata::Array(a) = parse_zarr_json(&without("storage_transformers")).unwrap() else {
            panic!()
        };
        assert!(a.storage_transformers.is_empty());
    }

    #[test]
    fn bare_string_codecs_and_zero_dim() {
        let doc = br#"{"zarr_format":3,"node_type":"array","shape":[],"data_type":"int32",
            "chunk_grid":{"name":"regular","configuration":{"chunk_shape":[]}},
            "fill_value":7,"codecs":[{"name":"bytes","configuration":{"endian":"big"}},"crc32c"]}"#;
        let NodeMetadata::Array(a) = parse_zarr_json(doc).unwrap() else {
            panic!()
        };
        assert_eq!(a.ndim(), 0);
        assert_eq!(a.codecs[1].name, "crc32c");
        assert_eq!(a.codecs[1].configuration, Value::Null);
        assert_eq!(a.codecs[1].raw, json!("crc32c"));
        assert_eq!(
            a.codecs[0].raw,
            json!({"name":"bytes","configuration":{"endian":"big"}})
        );
    }

    #[test]
    fn malformed_documents_are_errors() {
        let invalid = |bytes: &[u8]| {
            let r = parse_zarr_json(bytes);
            assert!(r.is_err(), "accepted {}", String::from_utf8_lossy(bytes));
            r.unwrap_err()
        };
        assert!(matches!(invalid(b"not json"), ZarrError::Json { .. }));
        assert!(matches!(invalid(b""), ZarrError::Json { .. }));
        assert!(matches!(invalid(b"[1,2]"), ZarrError::Json { .. }));
        invalid(br#"{"zarr_format":2,"node_type":"array"}"#);
        invalid(br#"{"zarr_format":"3","node_type":"group"}"#);
        invalid(br#"{"node_type":"group"}"#);
        invalid(br#"{"zarr_format":3,"node_type":"thing"}"#);
        invalid(br#"{"zarr_format":3}"#);
        invalid(&with("shape", json!([-1, 100])));
        invalid(&with("shape", json!([100.5, 100])));
        invalid(&with("shape", json!("100")));
        invalid(&with("shape", json!([100])));
        invalid(&with("shape", json!([1u64 << 63, 4])));
        invalid(&with("data_type", json!(5)));
        invalid(&with(
            "chunk_grid",
            json!({"name":"regular","configuration":{"chunk_shape":[0, 50]}}),
        ));
        invalid(&with(
            "chunk_grid",
            json!({"name":"regular","configuration":{"chunk_shape":[50]}}),
        ));
        invalid(&with("chunk_grid", json!({"name":"regular"})));
        invalid(&with("chunk_grid", json!("regular")));
        invalid(&with("chunk_grid", json!([50, 50])));
        invalid(&with(
            "chunk_grid",
            json!({"name":"rectilinear","configuration":{"kind":"inline","chunk_shapes":[[50],[50]]}}),
        ));
        assert!(matches!(
            invalid(&with("chunk_grid", json!({"name":"varying","configuration":{}}))),
            ZarrError::Unsupported { .. }
        ));
        invalid(&with("codecs", json!([])));
        invalid(&with("codecs", json!({"name":"bytes"})));
        invalid(&with("codecs", json!([{"configuration":{}}])));
        invalid(&with("codecs", json!([{"name":"bytes","configuration":[1]}])));
        invalid(&with("codecs", json!([{"name":""}])));
        invalid(&with("codecs", json!([3])));
        invalid(&with("chunk_key_encoding", json!({"name":"weird"})));
        invalid(&with("storage_transformers", json!({})));
        invalid(&without("fill_value"));
        invalid(&without("codecs"));
        invalid(&without("shape"));
        invalid(&without("data_type"));
        invalid(&without("chunk_grid"));
    }

    #[test]
    fn rectilinear_grids() {
        let grid = json!({"name":"rectilinear","configuration":{"kind":"inline","chunk_shapes":[[30,[40,2]],50]}});
        let NodeMetadata::Array(a) = parse_zarr_json(&with("chunk_grid", grid)).unwrap() else {
            panic!()
        };
        assert_eq!(a.chunk_shape, vec![30, 50]);
        assert_eq!(a.grid_shape().unwrap(), vec![3, 2]);
        assert!(a.rectilinear.is_some());
        assert!(array(ZARR_PYTHON_SHARDED).rectilinear.is_none());
    }

    #[test]
    fn absurd_but_representable_shapes() {
        // 2^64-1 elements in chunks of 1: element and chunk counts fit.
        let NodeMetadata::Array(a) = parse_zarr_json(&with("shape", json!([u64::MAX, 1]))).unwrap() else {
            panic!()
        };
        assert_eq!(a.shape[0], u64::MAX);
        // Chunk shape whose element count overflows is rejected.
        let mut doc: Value = serde_json::from_str(ZARR_PYTHON_SHARDED).unwrap();
        doc["chunk_grid"]["configuration"]["chunk_shape"] = json!([1u64 << 40, 1u64 << 40]);
        assert!(matches!(
            parse_zarr_json(&serde_json::to_vec(&doc).unwrap()),
            Err(ZarrError::Overflow { .. })
        ));
    }

    #[test]
    fn deeply_nested_json_is_an_error_not_a_stack_overflow() {
        let mut text = String::new();
        for _ in 0..100_000 {
            text.push('[');
        }
        assert!(parse_zarr_json(text.as_bytes()).is_err());
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            (0u64..4).prop_map(Value::from),
            "[a-z/.]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                proptest::collection::vec(("[a-z_]{1,12}", inner), 0..4)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_zarr_json(&bytes);
        }

        #[test]
        fn arbitrary_field_values_never_panic(
            field in prop_oneof![
                Just("shape"), Just("chunk_grid"), Just("codecs"), Just("chunk_key_encoding"),
                Just("data_type"), Just("fill_value"), Just("storage_transformers"), Just("node_type"),
            ],
            value in arb_json(),
        ) {
            if let Ok(NodeMetadata::Array(a)) = parse_zarr_json(&with(field, value)) {
                prop_assert_eq!(a.shape.len(), a.chunk_shape.len());
                prop_assert!(a.chunk_shape.iter().all(|&c| c > 0));
                prop_assert!(!a.codecs.is_empty());
            }
        }
    }
}
