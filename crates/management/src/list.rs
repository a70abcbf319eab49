//! Lists as RabbitMQ's management plugin serves them (rabbit_mgmt_util): sorted (`sort`,
//! `sort_reverse`, by default by vhost then name), optionally paginated (`page`,
//! `page_size`, filtered by `name`, as a substring or with `use_regex=true` a regular
//! expression, both case-insensitive) and cut down to `columns` (dotted paths).

use crate::error::{ApiError, ApiResult};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use std::cmp::Ordering;
use std::collections::HashMap;
use warren_broker::named_entries::InOrder;

pub type Query = HashMap<String, String>;

const DEFAULT_PAGE_SIZE: usize = 100;
const MAX_PAGE_SIZE: usize = 500;

/// Serves `items` as the query asks, by default sorted by vhost, then name.
pub fn respond(items: Vec<Value>, query: &Query) -> ApiResult {
    respond_sorted(items, query, &["vhost", "name"])
}

/// Serves `items` as the query asks, by default sorted by `default_sort` (none: as given).
pub fn respond_sorted(mut items: Vec<Value>, query: &Query, default_sort: &[&str]) -> ApiResult {
    sort(&mut items, query, default_sort);
    let Some(page) = Page::asked(query)? else {
        let items: Vec<Value> = items.iter().map(|v| columns(v, query)).collect();
        return Ok(Json(Value::Array(items)).into_response());
    };
    let total_count = items.len();
    let filtered = filter(items, query)?;
    let (range, filtered_count) = page.range(filtered.len())?;
    let slice: Vec<Value> = filtered[range].iter().map(|v| columns(v, query)).collect();
    Ok(page.respond(slice, filtered_count, total_count))
}

/// One vhost's part of a list whose rows are costly to build (a queue's JSON gathers its
/// stats), held in name order (`VHost::read_queues_in_order`): what a page sorted by names
/// needs to find its rows without reading the others.
pub trait NameOrdered {
    type Row: Clone;
    /// The row's name (what `sort=name` and the `name` filter read).
    fn name(row: &Self::Row) -> &str;
    /// Calls `read` with the rows in name order, none added or removed meanwhile.
    fn read_in_order<R>(
        &self,
        read: impl for<'a> FnOnce(&mut dyn InOrder<'a, Self::Row>) -> R,
    ) -> R;
}

/// As `respond` with the rows of `vhosts` (in vhost order, each one's rows in name order, so
/// that any sort's ties fall in RabbitMQ's order: by vhost, then name), building only what is
/// served. A page sorted by names (the default, `sort=name` or `sort=vhost`) reads its rows
/// from the vhosts' name order and builds those and no other: the first page of 1,000,000
/// queues took 971 ms when every queue was read to pick it (docs/benchmarks.md). Any other
/// query builds every row first. `build` makes the objects of the rows it is given, in order.
///
/// Unfiltered, a page skips whole vhosts by their counts and, within one, steps over the rows
/// before it from the nearer end, without reading them. A `name` filter reads every name (the
/// count of matches is part of the answer), but still builds only the page's rows.
pub fn respond_named<S: NameOrdered>(
    vhosts: &[S],
    query: &Query,
    build: impl FnOnce(&[(&S, S::Row)]) -> Vec<Value>,
) -> ApiResult {
    let page = Page::asked(query)?;
    let sort_key = query
        .get("sort")
        .map(String::as_str)
        .filter(|s| !s.is_empty());
    let by_names = matches!(sort_key, None | Some("vhost") | Some("name"));
    let (Some(page), true) = (page, by_names) else {
        let mut all = Vec::new();
        for vhost in vhosts {
            vhost.read_in_order(|rows| all.extend(rows.map(|r| (vhost, r.clone()))));
        }
        return respond(build(&all), query);
    };
    let matches = name_filter(query)?;
    let asked = Asked {
        matches: matches.as_ref(),
        reverse: query.get("sort_reverse").is_some_and(|v| v == "true"),
        wanted: page.wanted(),
    };
    let found = if sort_key == Some("name") {
        by_name_across(vhosts, &asked)
    } else {
        by_vhost_then_name(vhosts, &asked)
    };
    // Validates the page against the count (out of range: 400); the rows found are the
    // range's already, as `wanted` is it unclamped.
    let (range, filtered_count) = page.range(found.filtered_count)?;
    debug_assert_eq!(range.len(), found.rows.len());
    let slice: Vec<Value> = build(&found.rows)
        .iter()
        .map(|v| columns(v, query))
        .collect();
    Ok(page.respond(slice, filtered_count, found.total_count))
}

/// What a page sorted by names asks for: the rows whose names match (None: all), in reverse
/// order or not, at the positions `wanted` (unclamped) among them.
struct Asked<'q> {
    matches: Option<&'q regex::Regex>,
    reverse: bool,
    wanted: std::ops::Range<usize>,
}

/// What a page found: its rows in order, how many rows pass the filter, how many there are.
struct Found<'s, S: NameOrdered> {
    rows: Vec<(&'s S, S::Row)>,
    filtered_count: usize,
    total_count: usize,
}

impl<S: NameOrdered> Found<'_, S> {
    fn empty() -> Self {
        Found {
            rows: Vec::new(),
            filtered_count: 0,
            total_count: 0,
        }
    }
}

/// A page in the order by vhost, then name (reversed: the whole list reversed): the vhosts'
/// rows one after the other.
fn by_vhost_then_name<'s, S: NameOrdered>(vhosts: &'s [S], asked: &Asked) -> Found<'s, S> {
    let mut found = Found::empty();
    let in_order: Box<dyn Iterator<Item = &S>> = match asked.reverse {
        false => Box::new(vhosts.iter()),
        true => Box::new(vhosts.iter().rev()),
    };
    for vhost in in_order {
        vhost.read_in_order(|rows| {
            let len = rows.len();
            found.total_count += len;
            let first = found.filtered_count;
            if let Some(re) = asked.matches {
                let mut take = |row: &S::Row| {
                    if re.is_match(S::name(row)) {
                        if asked.wanted.contains(&found.filtered_count) {
                            found.rows.push((vhost, row.clone()));
                        }
                        found.filtered_count += 1;
                    }
                };
                match asked.reverse {
                    false => rows.for_each(&mut take),
                    true => rows.rev().for_each(take),
                }
                return;
            }
            found.filtered_count += len;
            // This vhost's rows at positions first..first + len: those the page wants.
            let from = asked.wanted.start.max(first) - first;
            let to = asked.wanted.end.min(first + len).saturating_sub(first);
            if from < to {
                let rows = nth_to(rows, asked.reverse, from, to, len);
                found.rows.extend(rows.into_iter().map(|r| (vhost, r)));
            }
        });
    }
    found
}

/// The rows `from..to` of `len` in order (reversed when asked), reached from the nearer end.
fn nth_to<'a, T: Clone + 'a>(
    rows: &mut dyn InOrder<'a, T>,
    reverse: bool,
    from: usize,
    to: usize,
    len: usize,
) -> Vec<T> {
    // Rows from..to counted from the other end are len - to..len - from.
    let (from_end, skip) = match len - to < from {
        true => (!reverse, len - to),
        false => (reverse, from),
    };
    let mut taken: Vec<T> = match from_end {
        false => rows.skip(skip).take(to - from).cloned().collect(),
        true => rows.rev().skip(skip).take(to - from).cloned().collect(),
    };
    if from_end != reverse {
        taken.reverse();
    }
    taken
}

/// A page in the order by name, across vhosts (a name in two vhosts: by vhost; reversed:
/// the whole list reversed): each vhost's first rows up to the page's end, merged.
fn by_name_across<'s, S: NameOrdered>(vhosts: &'s [S], asked: &Asked) -> Found<'s, S> {
    let mut found = Found::empty();
    // (vhost's position, row): every row that can be on the page.
    let mut candidates: Vec<(usize, &S, S::Row)> = Vec::new();
    for (position, vhost) in vhosts.iter().enumerate() {
        vhost.read_in_order(|rows| {
            let len = rows.len();
            found.total_count += len;
            let mut taken = 0;
            let mut take = |row: &S::Row| {
                if asked.matches.is_none_or(|re| re.is_match(S::name(row))) {
                    if taken < asked.wanted.end {
                        candidates.push((position, vhost, row.clone()));
                    }
                    taken += 1;
                }
                // Unfiltered, the count is known: no need to read further.
                asked.matches.is_some() || taken < asked.wanted.end
            };
            match asked.reverse {
                false => for_each_while(rows, &mut take),
                true => for_each_while(&mut rows.rev(), &mut take),
            }
            found.filtered_count += match asked.matches {
                Some(_) => taken,
                None => len,
            };
        });
    }
    candidates.sort_by(|(i, _, a), (j, _, b)| {
        let ordering = S::name(a).cmp(S::name(b)).then(i.cmp(j));
        if asked.reverse {
            ordering.reverse()
        } else {
            ordering
        }
    });
    found.rows = candidates
        .into_iter()
        .skip(asked.wanted.start)
        .take(asked.wanted.len())
        .map(|(_, vhost, row)| (vhost, row))
        .collect();
    found
}

/// Calls `each` on the rows until it returns false.
fn for_each_while<'a, T: 'a>(
    rows: &mut dyn Iterator<Item = &'a T>,
    each: &mut dyn FnMut(&T) -> bool,
) {
    for row in rows {
        if !each(row) {
            break;
        }
    }
}

/// The page a list query asks for.
struct Page {
    page: usize,
    page_size: usize,
}

impl Page {
    /// None when the query asks for no page (the whole list, as an array).
    fn asked(query: &Query) -> ApiResult<Option<Page>> {
        let Some(page) = query.get("page") else {
            return Ok(None);
        };
        let page: usize = page.parse().ok().filter(|p| *p >= 1).ok_or_else(|| {
            ApiError::bad_request(format!("page must be a positive integer: {page}"))
        })?;
        let page_size = match query.get("page_size") {
            None => DEFAULT_PAGE_SIZE,
            Some(s) => s
                .parse()
                .ok()
                .filter(|n| (1..=MAX_PAGE_SIZE).contains(n))
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "page_size must be between 1 and {MAX_PAGE_SIZE}: {s}"
                    ))
                })?,
        };
        Ok(Some(Page { page, page_size }))
    }

    /// The positions of the rows the page holds, however many there are.
    fn wanted(&self) -> std::ops::Range<usize> {
        let start = (self.page - 1).saturating_mul(self.page_size);
        start..start.saturating_add(self.page_size)
    }

    /// Which of `filtered_count` rows the page holds (and the count back).
    fn range(&self, filtered_count: usize) -> ApiResult<(std::ops::Range<usize>, usize)> {
        let page_count = filtered_count.div_ceil(self.page_size).max(1);
        if self.page > page_count {
            return Err(ApiError::bad_request("Page out of range"));
        }
        let start = (self.page - 1) * self.page_size;
        let end = (start + self.page_size).min(filtered_count);
        Ok((start.min(end)..end, filtered_count))
    }

    fn respond(&self, slice: Vec<Value>, filtered_count: usize, total_count: usize) -> Response {
        Json(json!({
            "filtered_count": filtered_count,
            "item_count": slice.len(),
            "items": slice,
            "page": self.page,
            "page_count": filtered_count.div_ceil(self.page_size).max(1),
            "page_size": self.page_size,
            "total_count": total_count,
        }))
        .into_response()
    }
}

/// One object, cut down to `columns` if asked.
pub fn respond_one(item: Value, query: &Query) -> Response {
    Json(columns(&item, query)).into_response()
}

fn filter(items: Vec<Value>, query: &Query) -> ApiResult<Vec<Value>> {
    let Some(re) = name_filter(query)? else {
        return Ok(items);
    };
    Ok(items
        .into_iter()
        .filter(|v| {
            v.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| re.is_match(n))
        })
        .collect())
}

/// The `name` filter a page applies (None: every name).
fn name_filter(query: &Query) -> ApiResult<Option<regex::Regex>> {
    let Some(name) = query.get("name").filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    let pattern = if query.get("use_regex").is_some_and(|v| v == "true") {
        name.clone()
    } else {
        regex::escape(name)
    };
    let re = regex::RegexBuilder::new(&pattern)
        .case_insensitive(true)
        .build()
        .map_err(|e| ApiError::bad_request(format!("invalid regex {name}: {e}")))?;
    Ok(Some(re))
}

fn sort(items: &mut [Value], query: &Query, default_sort: &[&str]) {
    let keys: Vec<&str> = match query.get("sort").filter(|s| !s.is_empty()) {
        Some(key) => vec![key.as_str()],
        None => default_sort.to_vec(),
    };
    items.sort_by(|a, b| {
        keys.iter()
            .map(|k| compare(lookup(a, k), lookup(b, k)))
            .find(|o| *o != Ordering::Equal)
            .unwrap_or(Ordering::Equal)
    });
    if query.get("sort_reverse").is_some_and(|v| v == "true") {
        items.reverse();
    }
}

fn compare(a: Option<&Value>, b: Option<&Value>) -> Ordering {
    match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => x
            .as_f64()
            .partial_cmp(&y.as_f64())
            .unwrap_or(Ordering::Equal),
        (Some(Value::String(x)), Some(Value::String(y))) => x.cmp(y),
        (Some(Value::Bool(x)), Some(Value::Bool(y))) => x.cmp(y),
        (None, Some(_)) => Ordering::Less,
        (Some(_), None) => Ordering::Greater,
        _ => Ordering::Equal,
    }
}

/// The value at a dotted path ("message_stats.publish").
fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

fn columns(v: &Value, query: &Query) -> Value {
    let Some(columns) = query.get("columns").filter(|c| !c.is_empty()) else {
        return v.clone();
    };
    let mut out = Map::new();
    for path in columns.split(',') {
        let Some(value) = lookup(v, path) else {
            continue;
        };
        let mut parts: Vec<&str> = path.split('.').collect();
        let last = parts.pop().expect("split yields one part at least");
        let mut at = &mut out;
        for part in parts {
            at = at
                .entry(part.to_owned())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("inserted as an object");
        }
        at.insert(last.to_owned(), value.clone());
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Query {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn columns_keep_nested_paths() {
        let v = json!({"name": "a", "message_stats": {"publish": 3, "ack": 1}, "x": 1});
        let c = columns(&v, &q(&[("columns", "name,message_stats.publish")]));
        assert_eq!(c, json!({"name": "a", "message_stats": {"publish": 3}}));
    }

    #[test]
    fn sorts_and_filters() {
        let mut items = vec![json!({"name": "b", "n": 2}), json!({"name": "a", "n": 10})];
        sort(
            &mut items,
            &q(&[("sort", "n"), ("sort_reverse", "true")]),
            &[],
        );
        assert_eq!(items[0]["name"], "a");
        let f = filter(items, &q(&[("name", "B")])).unwrap();
        assert_eq!(f.len(), 1);
    }

    async fn body(response: ApiResult) -> Value {
        let response = response.unwrap_or_else(|e| e.into_response());
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    /// One vhost's rows for `respond_named`, kept in name order as a vhost keeps them.
    struct TestVhost {
        rows: Vec<Value>,
    }

    impl NameOrdered for TestVhost {
        type Row = Value;
        fn name(row: &Value) -> &str {
            row["name"].as_str().unwrap()
        }
        fn read_in_order<R>(
            &self,
            read: impl for<'a> FnOnce(&mut dyn InOrder<'a, Value>) -> R,
        ) -> R {
            read(&mut self.rows.iter())
        }
    }

    /// Vhosts (in name order) holding the given names, each row numbered `n` as made.
    fn vhosts_of(names: &[(&str, String)]) -> Vec<TestVhost> {
        let mut vhosts: std::collections::BTreeMap<&str, std::collections::BTreeSet<&str>> =
            Default::default();
        for (vhost, name) in names {
            vhosts.entry(vhost).or_default().insert(name);
        }
        let mut n = 0;
        vhosts
            .into_iter()
            .map(|(vhost, names)| TestVhost {
                rows: names
                    .into_iter()
                    .map(|name| {
                        n += 1;
                        json!({"vhost": vhost, "name": name, "n": (n * 7) % 5})
                    })
                    .collect(),
            })
            .collect()
    }

    /// `respond_named`'s answer to `query`, and how many rows it built; then `respond`'s, given
    /// every row as the vhosts list them.
    async fn lazy_and_eager(vhosts: &[TestVhost], query: &Query) -> (Value, usize, Value) {
        let built = std::cell::Cell::new(0);
        let lazy = respond_named(vhosts, query, |served| {
            built.set(served.len());
            served.iter().map(|(_, v)| v.clone()).collect()
        });
        let every_row: Vec<Value> = vhosts.iter().flat_map(|v| v.rows.clone()).collect();
        let eager = respond(every_row, query);
        (body(lazy).await, built.get(), body(eager).await)
    }

    #[tokio::test]
    async fn a_page_sorted_by_names_builds_only_its_rows_and_serves_what_building_all_serves() {
        // Names repeated across vhosts, so that ties under `sort=name` keep their order.
        let names: Vec<(&str, String)> = (0..40)
            .map(|i| (["/", "v", "w"][i % 3], format!("q{}", (i * 7) % 13)))
            .collect();
        let vhosts = vhosts_of(&names);
        let queries = [
            vec![("page", "1"), ("page_size", "3")],
            vec![("page", "2"), ("page_size", "3")],
            vec![("page", "4"), ("page_size", "7")],
            vec![("page", "5"), ("page_size", "7")],
            vec![("page", "9"), ("page_size", "4")],
            vec![("page", "9"), ("page_size", "4"), ("sort_reverse", "true")],
            vec![("page", "1"), ("sort", "name"), ("sort_reverse", "true")],
            vec![("page", "2"), ("page_size", "5"), ("sort", "name")],
            vec![("page", "7"), ("page_size", "5"), ("sort", "name")],
            vec![
                ("page", "3"),
                ("page_size", "4"),
                ("sort", "vhost"),
                ("sort_reverse", "true"),
            ],
            vec![("page", "1"), ("sort", "vhost")],
            vec![("page", "1"), ("name", "Q1")],
            vec![
                ("page", "2"),
                ("page_size", "2"),
                ("name", "Q1"),
                ("sort", "name"),
            ],
            vec![("page", "1"), ("name", "^q[23]$"), ("use_regex", "true")],
            vec![
                ("page", "2"),
                ("page_size", "2"),
                ("name", "^q[23]$"),
                ("use_regex", "true"),
                ("sort_reverse", "true"),
            ],
            vec![("page", "1"), ("sort", "n"), ("columns", "name")],
            vec![("page", "9"), ("page_size", "5")],
            vec![("page", "1"), ("name", "nothing")],
            vec![("page", "2"), ("name", "nothing")],
            vec![],
            vec![("sort", "n")],
        ];
        for pairs in queries {
            let (lazy, built, eager) = lazy_and_eager(&vhosts, &q(&pairs)).await;
            assert_eq!(lazy, eager, "{pairs:?}");
            let by_names = !pairs.iter().any(|(k, v)| *k == "sort" && *v == "n");
            if by_names && lazy.get("item_count").is_some() {
                assert_eq!(
                    Some(built as u64),
                    lazy["item_count"].as_u64(),
                    "{pairs:?}: built only the page's rows"
                );
            }
        }
    }

    fn query_strategy() -> impl proptest::strategy::Strategy<Value = Vec<(&'static str, String)>> {
        use proptest::prelude::*;
        (
            1usize..12,
            1usize..8,
            prop::sample::select(vec!["", "name", "vhost", "n"]),
            any::<bool>(),
            prop::sample::select(vec!["", "1", "Q", "a1", "^[ab]", "b$"]),
            any::<bool>(),
        )
            .prop_map(|(page, page_size, sort, reverse, name, regex)| {
                let mut pairs = vec![
                    ("page", page.to_string()),
                    ("page_size", page_size.to_string()),
                ];
                if !sort.is_empty() {
                    pairs.push(("sort", sort.to_owned()));
                }
                if reverse {
                    pairs.push(("sort_reverse", "true".to_owned()));
                }
                if !name.is_empty() {
                    pairs.push(("name", name.to_owned()));
                }
                if regex {
                    pairs.push(("use_regex", "true".to_owned()));
                }
                pairs
            })
    }

    proptest::proptest! {
        /// Any page of any vhosts' rows, by any sort, filtered or not, is what sorting every
        /// row serves (the rows, their order and the counts).
        #[test]
        fn every_page_is_what_sorting_every_row_serves(
            names in proptest::collection::vec(
                (proptest::sample::select(vec!["/", "a", "b", "c"]), "[ab]?[a-c0-2]{1,3}"),
                0..60,
            ),
            query in query_strategy(),
        ) {
            let names: Vec<(&str, String)> = names;
            let vhosts = vhosts_of(&names);
            let pairs: Vec<(&str, &str)> = query.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let (lazy, _, eager) = runtime.block_on(lazy_and_eager(&vhosts, &q(&pairs)));
            proptest::prop_assert_eq!(lazy, eager, "{:?}", pairs);
        }
    }
}
