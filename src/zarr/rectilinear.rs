//! The `rectilinear` chunk grid (zarr-extensions `chunk-grid/rectilinear`): per axis, a
//! sequence of chunk edge lengths, spelled as one integer (a regular step, repeated as far as
//! needed), or a list of integers and run-length pairs `[edge, count]`.
//!
//! Edges are kept as runs, never expanded: a pair may repeat an edge 2^60 times, so expanding
//! would let a few bytes of metadata ask for any amount of memory. Each run records the index
//! of its first chunk and the element where it starts, so finding the chunk that holds an
//! element (or the start of chunk `i`) is a binary search over runs and a division. Starts are
//! checked sums; a run that would start past `u64::MAX` holds no addressable element and is
//! dropped, and a run's count is the integer form's "as many as needed" when it is
//! `u64::MAX`. The number of runs per axis is bounded ([`MAX_RUNS_PER_AXIS`]).
//!
//! [`EdgeAxis`] serves regular axes too ([`EdgeAxis::regular`]): the sharding layer asks the
//! same questions of a regular grid's shards (which shard holds chunk `i`, which chunks a
//! shard spans) and gets the same answers either way.

use serde_json::Value;

use crate::zarr::{json, ZarrError};

/// Most runs (integers or pairs) accepted on one axis.
pub const MAX_RUNS_PER_AXIS: usize = 1 << 20;

/// `count` consecutive chunks of `edge` elements, the first numbered `first` and starting at
/// element `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    edge: u64,
    count: u64,
    first: u64,
    start: u64,
}

/// The chunk edges along one axis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeAxis {
    runs: Vec<Run>,
}

impl EdgeAxis {
    /// Chunks of `edge` elements, as many as needed (`edge` > 0).
    pub fn regular(edge: u64) -> Self {
        let mut axis = EdgeAxis { runs: Vec::new() };
        axis.push(edge.max(1), u64::MAX);
        axis
    }

    /// Append `count` chunks of `edge`; false (and nothing appended) once the axis has run
    /// past `u64::MAX` elements or chunks.
    fn push(&mut self, edge: u64, count: u64) -> bool {
        let (first, start) = match self.runs.last() {
            None => (0, 0),
            Some(r) => match (r.first.checked_add(r.count), r.edge.checked_mul(r.count)) {
                (Some(first), Some(len)) => match r.start.checked_add(len) {
                    Some(start) => (first, start),
                    None => return false,
                },
                _ => return false,
            },
        };
        match self.runs.last_mut() {
            Some(r) if r.edge == edge => r.count = r.count.saturating_add(count),
            _ => self.runs.push(Run {
                edge,
                count,
                first,
                start,
            }),
        }
        true
    }

    /// Elements the axis covers (saturating: `u64::MAX` when it covers every index).
    pub fn extent(&self) -> u64 {
        self.runs.last().map_or(0, |r| {
            r.edge
                .checked_mul(r.count)
                .and_then(|len| r.start.checked_add(len))
                .unwrap_or(u64::MAX)
        })
    }

    /// Chunks on the axis (saturating).
    pub fn len(&self) -> u64 {
        self.runs.last().map_or(0, |r| r.first.saturating_add(r.count))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The chunk holding element `e`: its index, start and edge; `None` past the extent.
    pub fn find(&self, e: u64) -> Option<(u64, u64, u64)> {
        let at = self.runs.partition_point(|r| r.start <= e).checked_sub(1)?;
        let r = self.runs.get(at)?;
        let k = (e - r.start) / r.edge;
        (k < r.count).then(|| (r.first + k, r.start + k * r.edge, r.edge))
    }

    /// Start and edge of chunk `i`; `None` past the last chunk.
    pub fn chunk(&self, i: u64) -> Option<(u64, u64)> {
        let at = self.runs.partition_point(|r| r.first <= i).checked_sub(1)?;
        let r = self.runs.get(at)?;
        let k = i - r.first;
        if k >= r.count {
            return None;
        }
        Some((r.start.checked_add(k.checked_mul(r.edge)?)?, r.edge))
    }

    /// How many chunks it takes to cover `[0, len)` (all of them when the axis is shorter).
    pub fn count_covering(&self, len: u64) -> u64 {
        match len.checked_sub(1) {
            None => 0,
            Some(last) => self.find(last).map_or(self.len(), |(i, _, _)| i + 1),
        }
    }

    /// Every distinct run's edge, in order.
    pub fn edges(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs.iter().map(|r| r.edge)
    }

    /// The largest edge (0 for an empty axis).
    pub fn max_edge(&self) -> u64 {
        self.edges().max().unwrap_or(0)
    }

    /// The same axis counted in units of `unit` elements; `None` unless every edge is a
    /// multiple of `unit`.
    pub fn divided(&self, unit: u64) -> Option<EdgeAxis> {
        if unit == 0 || self.runs.iter().any(|r| r.edge % unit != 0) {
            return None;
        }
        let runs = self
            .runs
            .iter()
            .map(|r| Run {
                edge: r.edge / unit,
                start: r.start / unit,
                ..*r
            })
            .collect();
        Some(EdgeAxis { runs })
    }
}

/// A parsed rectilinear chunk grid, one [`EdgeAxis`] per dimension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RectilinearGrid {
    pub axes: Vec<EdgeAxis>,
}

const FIELD: &str = "chunk_grid.configuration.chunk_shapes";

impl RectilinearGrid {
    /// Parse the `configuration` of a `rectilinear` chunk grid for an array of `shape`: kind
    /// `inline`, one edge spec per dimension, positive integers only, and edges that reach
    /// at least the array's length on every axis.
    pub fn from_configuration(config: &Value, shape: &[u64]) -> Result<Self, ZarrError> {
        let config = json::object(config, "chunk_grid.configuration")?;
        let kind = json::required(config, "kind", "chunk_grid.configuration.kind")?;
        match json::string(kind, "chunk_grid.configuration.kind")? {
            "inline" => {}
            other => {
                return Err(ZarrError::unsupported(
                    "rectilinear chunk grid",
                    format!("kind {other:?}, only \"inline\""),
                ))
            }
        }
        let specs = json::array(json::required(config, "chunk_shapes", FIELD)?, FIELD)?;
        if specs.len() != shape.len() {
            return Err(ZarrError::invalid(
                FIELD,
                format!("has {} dimensions but the shape has {}", specs.len(), shape.len()),
            ));
        }
        let axes = specs
            .iter()
            .enumerate()
            .map(|(d, spec)| parse_axis(spec, &format!("{FIELD}[{d}]")))
            .collect::<Result<Vec<_>, _>>()?;
        for (d, (axis, &len)) in axes.iter().zip(shape).enumerate() {
            if axis.extent() < len {
                return Err(ZarrError::invalid(
                    format!("{FIELD}[{d}]"),
                    format!("edges sum to {}, less than the shape's {len}", axis.extent()),
                ));
            }
        }
        Ok(RectilinearGrid { axes })
    }

    /// Chunks along each dimension that hold elements of an array of `shape`.
    pub fn grid_shape(&self, shape: &[u64]) -> Vec<u64> {
        self.axes
            .iter()
            .zip(shape)
            .map(|(a, &len)| a.count_covering(len))
            .collect()
    }

    /// The first chunk's edges (the chunk shape a reader of regular grids would guess).
    pub fn first_edges(&self) -> Vec<u64> {
        self.axes
            .iter()
            .map(|a| a.chunk(0).map_or(0, |(_, edge)| edge))
            .collect()
    }
}

/// One dimension's edges: an integer, or a list of integers and `[edge, count]` pairs.
fn parse_axis(spec: &Value, field: &str) -> Result<EdgeAxis, ZarrError> {
    let positive = |v: &Value, field: &str| match v.as_u64() {
        Some(n) if n > 0 => Ok(n),
        _ => Err(ZarrError::invalid(field, "must be a positive integer")),
    };
    if spec.is_number() {
        return Ok(EdgeAxis::regular(positive(spec, field)?));
    }
    let items = json::array(spec, field)?;
    if items.len() > MAX_RUNS_PER_AXIS {
        return Err(ZarrError::TooLarge {
            what: "runs of chunk edges on one axis",
            value: items.len() as u64,
            limit: MAX_RUNS_PER_AXIS as u64,
        });
    }
    let mut axis = EdgeAxis { runs: Vec::new() };
    for (i, item) in items.iter().enumerate() {
        let field = format!("{field}[{i}]");
        let (edge, count) = match item {
            Value::Array(pair) => match pair.as_slice() {
                [edge, count] => (positive(edge, &field)?, positive(count, &field)?),
                _ => return Err(ZarrError::invalid(field, "a run must be [edge, count]")),
            },
            other => (positive(other, &field)?, 1),
        };
        if !axis.push(edge, count) {
            break; // past u64::MAX elements: nothing further is addressable
        }
    }
    Ok(axis)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn grid(shapes: Value, shape: &[u64]) -> Result<RectilinearGrid, ZarrError> {
        RectilinearGrid::from_configuration(&json!({"kind": "inline", "chunk_shapes": shapes}), shape)
    }

    /// The explicit edges of an axis, up to `n` of them.
    fn expand(axis: &EdgeAxis, n: u64) -> Vec<u64> {
        (0..n).map_while(|i| axis.chunk(i).map(|(_, e)| e)).collect()
    }

    #[test]
    fn the_spec_example() {
        let g = grid(json!([4, [1, 2, 3], [[4, 2]], [[1, 3], 3], [4, 4, 4]]), &[6; 5]).unwrap();
        let edges: Vec<Vec<u64>> = g.axes.iter().map(|a| expand(a, 10)).collect();
        assert_eq!(edges[0], [4; 10]);
        assert_eq!(edges[1], [1, 2, 3]);
        assert_eq!(edges[2], [4, 4]);
        assert_eq!(edges[3], [1, 1, 1, 3]);
        assert_eq!(edges[4], [4, 4, 4]);
        assert_eq!(g.grid_shape(&[6; 5]), [2, 3, 2, 4, 2]);
        assert_eq!(g.first_edges(), [4, 1, 4, 1, 4]);
        assert_eq!(g.axes[4].extent(), 12);
        assert_eq!(g.axes[0].extent(), u64::MAX);
    }

    #[test]
    fn what_zarr_python_writes() {
        let g = grid(json!([[16, [24, 2]], [[24, 2]]]), &[64, 48]).unwrap();
        let a = &g.axes[0];
        assert_eq!(a.find(0), Some((0, 0, 16)));
        assert_eq!(a.find(15), Some((0, 0, 16)));
        assert_eq!(a.find(16), Some((1, 16, 24)));
        assert_eq!(a.find(40), Some((2, 40, 24)));
        assert_eq!(a.find(63), Some((2, 40, 24)));
        assert_eq!(a.find(64), None);
        assert_eq!(a.chunk(2), Some((40, 24)));
        assert_eq!(a.chunk(3), None);
        assert_eq!(a.len(), 3);
        assert_eq!(g.grid_shape(&[64, 48]), [3, 2]);
        assert_eq!(g.grid_shape(&[17, 0]), [2, 0]);
        let units = a.divided(8).unwrap();
        assert_eq!(expand(&units, 9), [2, 3, 3]);
        assert_eq!(units.find(4), Some((1, 2, 3)));
        assert!(a.divided(16).is_none());
        assert!(a.divided(0).is_none());
    }

    #[test]
    fn overflowing_the_shape_is_allowed_falling_short_is_not() {
        assert!(grid(json!([[10, 10, 10]]), &[25]).is_ok());
        assert!(grid(json!([[10, 10]]), &[25]).is_err());
        assert!(grid(json!([[]]), &[0]).is_ok());
        assert!(grid(json!([[]]), &[1]).is_err());
    }

    #[test]
    fn malformed_specs_are_errors() {
        for bad in [
            json!([0]),
            json!([-3]),
            json!([2.5]),
            json!(["4"]),
            json!([[0]]),
            json!([[[4, 0]]]),
            json!([[[0, 4]]]),
            json!([[[4]]]),
            json!([[[4, 2, 1]]]),
            json!([[null]]),
            json!([{"a": 1}]),
            json!(4),
            json!([4, 4]),
        ] {
            assert!(grid(bad.clone(), &[8]).is_err(), "{bad}");
        }
        let no_kind = json!({"chunk_shapes": [[4, 4]]});
        assert!(RectilinearGrid::from_configuration(&no_kind, &[8]).is_err());
        let other_kind = json!({"kind": "file", "chunk_shapes": [[4, 4]]});
        assert!(matches!(
            RectilinearGrid::from_configuration(&other_kind, &[8]),
            Err(ZarrError::Unsupported { .. })
        ));
        assert!(RectilinearGrid::from_configuration(&json!([]), &[8]).is_err());
    }

    #[test]
    fn huge_runs_are_not_expanded() {
        let g = grid(json!([[[3, u64::MAX], 5, [7, 1u64 << 62]]]), &[u64::MAX]).unwrap();
        let a = &g.axes[0];
        assert_eq!(a.extent(), u64::MAX);
        assert_eq!(a.find(u64::MAX - 1).map(|(_, _, e)| e), Some(3));
        assert_eq!(a.chunk(1 << 40), Some((3 << 40, 3)));
        assert_eq!(a.count_covering(u64::MAX), u64::MAX / 3);
        // A run that would start past u64::MAX is dropped.
        let g = grid(json!([[[1u64 << 62, 4], 2, [5, 5]]]), &[10]).unwrap();
        assert_eq!(g.axes[0].edges().collect::<Vec<_>>(), [1 << 62]);
    }

    #[test]
    fn too_many_runs_are_refused() {
        let items = vec![json!(1); MAX_RUNS_PER_AXIS + 1];
        assert!(matches!(grid(json!([items]), &[1]), Err(ZarrError::TooLarge { .. })));
    }

    #[test]
    fn regular_axes_answer_like_a_regular_grid() {
        let a = EdgeAxis::regular(5);
        assert_eq!(a.find(12), Some((2, 10, 5)));
        assert_eq!(a.chunk(3), Some((15, 5)));
        assert_eq!(a.count_covering(11), 3);
        assert_eq!(a.count_covering(0), 0);
        assert_eq!(a.find(u64::MAX), Some((u64::MAX / 5, u64::MAX / 5 * 5, 5)));
    }

    proptest! {
        #[test]
        fn find_and_chunk_agree(edges in proptest::collection::vec((1u64..20, 1u64..5), 1..8), e in 0u64..400) {
            let spec: Vec<Value> = edges.iter().map(|&(edge, n)| json!([edge, n])).collect();
            let g = grid(json!([spec]), &[1]).unwrap();
            let a = &g.axes[0];
            let explicit: Vec<u64> = edges.iter().flat_map(|&(edge, n)| std::iter::repeat_n(edge, n as usize)).collect();
            prop_assert_eq!(expand(a, 100), explicit.clone());
            let mut start = 0;
            let mut expected = None;
            for (i, &edge) in explicit.iter().enumerate() {
                if e >= start && e < start + edge {
                    expected = Some((i as u64, start, edge));
                }
                start += edge;
            }
            prop_assert_eq!(a.find(e), expected);
            if let Some((i, s, edge)) = expected {
                prop_assert_eq!(a.chunk(i), Some((s, edge)));
            }
        }

        #[test]
        fn arbitrary_specs_never_panic(spec in proptest::collection::vec(
            prop_oneof![any::<u64>().prop_map(Value::from), (any::<u64>(), any::<u64>()).prop_map(|(a, b)| json!([a, b]))],
            0..6), e: u64, i: u64, len: u64) {
            if let Ok(g) = grid(json!([spec]), &[0]) {
                let a = &g.axes[0];
                let _ = (a.find(e), a.chunk(i), a.count_covering(len), a.extent(), a.divided(3));
            }
        }
    }
}
