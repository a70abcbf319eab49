//! A broker's HTTP endpoints as scenario scale reads them: the management API (RabbitMQ's
//! and Warren's, same paths and JSON) and Prometheus `/metrics`. Each GET is timed from the
//! request to the last byte of the body, on tokio's blocking pool (ureq is blocking), and
//! the body's size kept: the "HTTP API timings" columns. `/api/nodes`' `mem_used` is the
//! broker's memory when its process cannot be read (a remote broker).

use base64::Engine as _;
use std::time::{Duration, Instant};

/// One timed GET.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub ms: f64,
    pub bytes: usize,
    pub body: String,
}

/// GETs with basic auth against one broker's HTTP endpoints.
#[derive(Clone)]
pub struct BrokerHttp {
    agent: ureq::Agent,
    authorization: String,
}

/// What one GET may take: /api/definitions at a million queues is large and slow, and a
/// step that waits longer than this reports the endpoint as failed instead of hanging.
const TIMEOUT: Duration = Duration::from_secs(300);

impl BrokerHttp {
    pub fn new(user: &str, password: &str) -> BrokerHttp {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(TIMEOUT))
            .build();
        let credentials =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        BrokerHttp {
            agent: ureq::Agent::new_with_config(config),
            authorization: format!("Basic {credentials}"),
        }
    }

    /// GETs `url` and times it to the body's last byte; an error names the URL and says why
    /// (transport failure or a non-2xx status).
    pub async fn get(&self, url: &str) -> anyhow::Result<Fetched> {
        let this = self.clone();
        let url = url.to_owned();
        tokio::task::spawn_blocking(move || this.get_blocking(&url)).await?
    }

    fn get_blocking(&self, url: &str) -> anyhow::Result<Fetched> {
        let started = Instant::now();
        let mut response = self
            .agent
            .get(url)
            .header("Authorization", &self.authorization)
            .call()
            .map_err(|e| anyhow::anyhow!("GET {url}: {e}"))?;
        let status = response.status().as_u16();
        let body = response
            .body_mut()
            .with_config()
            .limit(u64::MAX)
            .read_to_string()
            .map_err(|e| anyhow::anyhow!("GET {url}: {e}"))?;
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        if !(200..300).contains(&status) {
            anyhow::bail!("GET {url}: HTTP {status}");
        }
        Ok(Fetched {
            ms,
            bytes: body.len(),
            body,
        })
    }

    /// The broker's memory in bytes as its management API counts it: the sum of `mem_used`
    /// over `/api/nodes` (one node here; a cluster's nodes together).
    pub async fn mem_used(&self, management_url: &str) -> anyhow::Result<u64> {
        let url = format!("{}/api/nodes", management_url.trim_end_matches('/'));
        let fetched = self.get(&url).await?;
        mem_used_of_nodes(&fetched.body)
            .ok_or_else(|| anyhow::anyhow!("GET {url}: no mem_used in the answer"))
    }
}

/// The sum of the nodes' `mem_used` in an `/api/nodes` answer; None when no node has one.
pub fn mem_used_of_nodes(body: &str) -> Option<u64> {
    let nodes: serde_json::Value = serde_json::from_str(body).ok()?;
    let used: Vec<u64> = nodes
        .as_array()?
        .iter()
        .filter_map(|n| n.get("mem_used")?.as_u64())
        .collect();
    (!used.is_empty()).then(|| used.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_used_sums_the_nodes() {
        let one = r#"[{"name":"rabbit@h","mem_used":123456789,"mem_limit":9}]"#;
        assert_eq!(mem_used_of_nodes(one), Some(123_456_789));
        let two = r#"[{"name":"a","mem_used":10},{"name":"b","mem_used":32},{"name":"c"}]"#;
        assert_eq!(mem_used_of_nodes(two), Some(42));
        // A node still starting has no figure; an error answer is not a list.
        assert_eq!(mem_used_of_nodes(r#"[{"name":"a"}]"#), None);
        assert_eq!(mem_used_of_nodes(r#"{"error":"not_authorised"}"#), None);
        assert_eq!(mem_used_of_nodes("<html>"), None);
    }
}
