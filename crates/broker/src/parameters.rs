//! Runtime parameters, as RabbitMQ's `rabbit_runtime_parameters`: values kept per (vhost,
//! component, name) and global ones per name, for components Warren does not run itself
//! (federation upstreams, shovels, …) so that definitions carry them through an
//! import/export unchanged. Values are JSON texts; this crate does not interpret them.
//!
//! Components Warren does act on are not kept here: policies and operator policies live with
//! their vhost, and `vhost-limits` are the vhost's limits. The cluster's name is a global
//! parameter (`cluster_name`), as in RabbitMQ.
//!
//! Parameters are durable: a change hook lets the broker persist them with the rest of its
//! definitions (snapshot.rs).

use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The components whose parameters Warren keeps: those of RabbitMQ's federation and shovel
/// plugins, which definitions exported from RabbitMQ carry. Any other component is refused,
/// as RabbitMQ refuses a component no plugin registered (`rabbit_runtime_parameters`).
pub const KEPT_COMPONENTS: [&str; 4] = [
    "federation",
    "federation-upstream",
    "federation-upstream-set",
    "shovel",
];

/// RabbitMQ's refusal of a parameter whose component nothing registered.
pub fn check_component(component: &str) -> Result<(), String> {
    match KEPT_COMPONENTS.contains(&component) {
        true => Ok(()),
        false => Err(format!(
            "Validation failed\n\ncomponent {component} not found\n"
        )),
    }
}

type ChangeHook = Box<dyn Fn() + Send + Sync>;

/// A vhost-scoped runtime parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parameter {
    pub vhost: String,
    pub component: String,
    pub name: String,
    /// The value as JSON text.
    pub value_json: String,
}

#[derive(Default)]
pub struct RuntimeParameters {
    /// (vhost, component, name) → JSON text.
    scoped: RwLock<BTreeMap<(String, String, String), String>>,
    /// name → JSON text.
    global: RwLock<BTreeMap<String, String>>,
    on_change: OnceLock<ChangeHook>,
}

impl std::fmt::Debug for RuntimeParameters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeParameters")
            .field("scoped", &self.scoped.read().len())
            .field("global", &self.global.read().len())
            .finish()
    }
}

impl RuntimeParameters {
    /// Called (outside the locks) after every set or clear; the broker persists from it.
    /// Set once.
    pub fn set_change_hook(&self, hook: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_change.set(Box::new(hook));
    }

    fn changed(&self) {
        if let Some(hook) = self.on_change.get() {
            hook();
        }
    }

    pub fn set(&self, vhost: &str, component: &str, name: &str, value_json: String) {
        self.scoped.write().insert(
            (vhost.to_owned(), component.to_owned(), name.to_owned()),
            value_json,
        );
        self.changed();
    }

    pub fn clear(&self, vhost: &str, component: &str, name: &str) -> bool {
        let removed = self
            .scoped
            .write()
            .remove(&(vhost.to_owned(), component.to_owned(), name.to_owned()))
            .is_some();
        if removed {
            self.changed();
        }
        removed
    }

    /// Every vhost-scoped parameter, ordered by vhost, component, name.
    pub fn list(&self) -> Vec<Parameter> {
        self.scoped
            .read()
            .iter()
            .map(|((vhost, component, name), value)| Parameter {
                vhost: vhost.clone(),
                component: component.clone(),
                name: name.clone(),
                value_json: value.clone(),
            })
            .collect()
    }

    pub fn set_global(&self, name: &str, value_json: String) {
        self.global.write().insert(name.to_owned(), value_json);
        self.changed();
    }

    pub fn clear_global(&self, name: &str) -> bool {
        let removed = self.global.write().remove(name).is_some();
        if removed {
            self.changed();
        }
        removed
    }

    /// One global parameter's JSON text.
    pub fn global(&self, name: &str) -> Option<String> {
        self.global.read().get(name).cloned()
    }

    /// Replaces every parameter with what a snapshot held (recovery; no change hook).
    pub fn restore(&self, scoped: Vec<Parameter>, global: Vec<(String, String)>) {
        *self.scoped.write() = scoped
            .into_iter()
            .map(|p| ((p.vhost, p.component, p.name), p.value_json))
            .collect();
        *self.global.write() = global.into_iter().collect();
    }

    /// Every global parameter as (name, JSON text), by name.
    pub fn list_global(&self) -> Vec<(String, String)> {
        self.global
            .read()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Drops the parameters of a deleted vhost (the vhost's deletion persists; no hook).
    pub fn forget_vhost(&self, vhost: &str) {
        self.scoped.write().retain(|(v, _, _), _| v != vhost);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_list_clear_and_forget() {
        let p = RuntimeParameters::default();
        p.set(
            "v",
            "federation-upstream",
            "up",
            r#"{"uri":"amqp://x"}"#.into(),
        );
        p.set("w", "shovel", "s", "{}".into());
        p.set_global("cluster_tags", r#"{"env":"test"}"#.into());
        assert_eq!(p.list().len(), 2);
        assert_eq!(p.list()[0].component, "federation-upstream");
        assert_eq!(
            p.list_global(),
            [("cluster_tags".to_string(), r#"{"env":"test"}"#.to_string())]
        );
        p.forget_vhost("v");
        assert_eq!(p.list().len(), 1);
        assert!(p.clear("w", "shovel", "s"));
        assert!(!p.clear("w", "shovel", "s"));
        assert!(p.clear_global("cluster_tags"));
    }
}
