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
    let Some(page) = query.get("page") else {
        let items: Vec<Value> = items.iter().map(|v| columns(v, query)).collect();
        return Ok(Json(Value::Array(items)).into_response());
    };
    let page: usize =
        page.parse().ok().filter(|p| *p >= 1).ok_or_else(|| {
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
    let total_count = items.len();
    let filtered = filter(items, query)?;
    let filtered_count = filtered.len();
    let page_count = filtered_count.div_ceil(page_size).max(1);
    if page > page_count {
        return Err(ApiError::bad_request("Page out of range"));
    }
    let slice: Vec<Value> = filtered
        .iter()
        .skip((page - 1) * page_size)
        .take(page_size)
        .map(|v| columns(v, query))
        .collect();
    Ok(Json(json!({
        "filtered_count": filtered_count,
        "item_count": slice.len(),
        "items": slice,
        "page": page,
        "page_count": page_count,
        "page_size": page_size,
        "total_count": total_count,
    }))
    .into_response())
}

/// One object, cut down to `columns` if asked.
pub fn respond_one(item: Value, query: &Query) -> Response {
    Json(columns(&item, query)).into_response()
}

fn filter(items: Vec<Value>, query: &Query) -> ApiResult<Vec<Value>> {
    let Some(name) = query.get("name").filter(|n| !n.is_empty()) else {
        return Ok(items);
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
    Ok(items
        .into_iter()
        .filter(|v| {
            v.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| re.is_match(n))
        })
        .collect())
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
}
