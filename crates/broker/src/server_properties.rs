//! What the broker tells a client about itself when it connects: RabbitMQ's server
//! properties (product, version, platform…), which AMQP 0-9-1 sends in connection.start and
//! AMQP 1.0 in open's `properties`. One list for both protocols; the operator's
//! `--server-property KEY=VALUE` settings (RabbitMQ's `server_properties`) replace or add
//! entries, and `version` is the RabbitMQ release Warren behaves as (`crate::version`).
//!
//! AMQP 1.0's open says what RabbitMQ 4's own AMQP 1.0 clients require before they do
//! anything (rabbitmq-amqp-python-client refuses a product other than "RabbitMQ", it and
//! the Java client a version under 4.0): product "RabbitMQ" and the RabbitMQ 4 release whose
//! AMQP 1.0 Warren's reproduces; what Warren is stays in `product_version` and `information`.

use crate::version::{PRODUCT_NAME, PRODUCT_VERSION, RABBITMQ_AMQP10_VERSION, RABBITMQ_VERSION};

/// Warren's own properties, before the configured ones.
const DEFAULTS: &[(&str, &str)] = &[
    ("product", PRODUCT_NAME),
    // The RabbitMQ release Warren behaves as, which clients and suites gate on; Warren's own
    // release is `product_version`.
    ("version", RABBITMQ_VERSION),
    ("product_version", PRODUCT_VERSION),
    ("platform", "Rust"),
    ("copyright", "Warren contributors"),
    (
        "information",
        "An AMQP 0-9-1 and AMQP 1.0 broker compatible with RabbitMQ clients",
    ),
];

/// Every server property as (key, value): Warren's defaults, `cluster_name` (the broker's
/// current one), then each `configured` entry replacing the default of its key or added
/// after them. `capabilities` is the protocol's own and cannot be configured.
pub fn server_properties<'a>(
    configured: &'a [(String, String)],
    cluster_name: &'a str,
) -> Vec<(&'a str, &'a str)> {
    with_configured(DEFAULTS.to_vec(), configured, cluster_name)
}

/// What AMQP 1.0's open carries: as [`server_properties`], with product "RabbitMQ" and
/// RabbitMQ 4's version by default (see the module comment); configured entries still win.
pub fn amqp10_server_properties<'a>(
    configured: &'a [(String, String)],
    cluster_name: &'a str,
) -> Vec<(&'a str, &'a str)> {
    let mut defaults = DEFAULTS.to_vec();
    for (key, value) in defaults.iter_mut() {
        match *key {
            "product" => *value = "RabbitMQ",
            "version" => *value = RABBITMQ_AMQP10_VERSION,
            _ => {}
        }
    }
    with_configured(defaults, configured, cluster_name)
}

fn with_configured<'a>(
    mut properties: Vec<(&'a str, &'a str)>,
    configured: &'a [(String, String)],
    cluster_name: &'a str,
) -> Vec<(&'a str, &'a str)> {
    properties.push(("cluster_name", cluster_name));
    for (key, value) in configured {
        if key == "capabilities" {
            continue;
        }
        match properties.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => properties.push((key, value)),
        }
    }
    properties
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_properties_replace_or_add_but_never_the_capabilities() {
        let configured = [
            ("product".to_owned(), "Acme".to_owned()),
            ("region".to_owned(), "eu".to_owned()),
            ("capabilities".to_owned(), "none".to_owned()),
        ];
        let properties = server_properties(&configured, "rabbit@here");
        let get = |key: &str| properties.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        assert_eq!(get("product"), Some("Acme"));
        assert_eq!(get("region"), Some("eu"));
        assert_eq!(get("version"), Some(RABBITMQ_VERSION));
        assert_eq!(get("cluster_name"), Some("rabbit@here"));
        assert_eq!(get("capabilities"), None);
        assert_eq!(
            properties.iter().filter(|(k, _)| *k == "product").count(),
            1
        );
    }

    #[test]
    fn amqp10_says_rabbitmq_4_unless_configured_otherwise() {
        let properties = amqp10_server_properties(&[], "c");
        let get = |key: &str| properties.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        assert_eq!(get("product"), Some("RabbitMQ"));
        assert_eq!(get("version"), Some(RABBITMQ_AMQP10_VERSION));
        assert_eq!(get("product_version"), Some(PRODUCT_VERSION));
        let configured = [("version".to_owned(), "4.2.0".to_owned())];
        let properties = amqp10_server_properties(&configured, "c");
        assert!(properties.contains(&("version", "4.2.0")));
    }
}
