//! A user's limits, RabbitMQ's `max-connections` and `max-channels` (`rabbitmqctl
//! set_user_limits`, `/api/user-limits`, a definitions file's `"limits"` on a user): how many
//! connections the user may have open on this node at once, and how many channels across
//! them. The counting and the refusals are `UserUsage`'s; this is only the setting.

use serde_json::{Map, Value};

pub const MAX_CONNECTIONS: &str = "max-connections";
pub const MAX_CHANNELS: &str = "max-channels";

/// A user's limits; `None` is no limit. A limit of 0 refuses every connection (or channel),
/// as RabbitMQ's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserLimits {
    pub max_connections: Option<u32>,
    pub max_channels: Option<u32>,
}

impl UserLimits {
    pub fn is_empty(&self) -> bool {
        *self == UserLimits::default()
    }

    /// Sets one limit by its RabbitMQ name; a negative value is no limit (RabbitMQ's rule).
    /// An unknown name is refused with RabbitMQ's word for it.
    pub fn set(&mut self, name: &str, value: i64) -> Result<(), String> {
        let limit = u32::try_from(value).ok();
        match name {
            MAX_CONNECTIONS => self.max_connections = limit,
            MAX_CHANNELS => self.max_channels = limit,
            other => return Err(format!("Unrecognised terms [{other}] in user-limits")),
        }
        Ok(())
    }

    /// Clears one limit by its RabbitMQ name, or every limit for "all" (rabbitmqctl's word).
    pub fn clear(&mut self, name: &str) -> Result<(), String> {
        match name {
            "all" => *self = UserLimits::default(),
            MAX_CONNECTIONS => self.max_connections = None,
            MAX_CHANNELS => self.max_channels = None,
            other => return Err(format!("Unrecognised terms [{other}] in user-limits")),
        }
        Ok(())
    }

    /// Reads a JSON object of limits (`{"max-connections": 10, "max-channels": 5}`), as a
    /// definitions file and `rabbitmqctl set_user_limits` give them; every value an integer.
    pub fn from_json(value: &Value) -> Result<UserLimits, String> {
        let Value::Object(object) = value else {
            return Err(format!("user limits must be a JSON object, found {value}"));
        };
        let mut limits = UserLimits::default();
        for (name, v) in object {
            let n = v
                .as_i64()
                .ok_or_else(|| format!("user limit '{name}' must be an integer, found {v}"))?;
            limits.set(name, n)?;
        }
        Ok(limits)
    }

    /// The limits set, as RabbitMQ lists them (`{}` when none).
    pub fn to_json(&self) -> Value {
        let mut object = Map::new();
        if let Some(n) = self.max_connections {
            object.insert(MAX_CONNECTIONS.into(), n.into());
        }
        if let Some(n) = self.max_channels {
            object.insert(MAX_CHANNELS.into(), n.into());
        }
        Value::Object(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn limits_read_and_list_as_rabbitmq_writes_them() {
        let limits =
            UserLimits::from_json(&json!({"max-connections": 10, "max-channels": 0})).unwrap();
        assert_eq!(limits.max_connections, Some(10));
        assert_eq!(limits.max_channels, Some(0));
        assert_eq!(
            limits.to_json(),
            json!({"max-connections": 10, "max-channels": 0})
        );
        assert_eq!(UserLimits::default().to_json(), json!({}));
    }

    #[test]
    fn a_negative_limit_is_none_and_unknown_names_are_refused() {
        let mut limits = UserLimits::from_json(&json!({"max-connections": -1})).unwrap();
        assert!(limits.is_empty());
        assert!(UserLimits::from_json(&json!({"max-queues": 1}))
            .unwrap_err()
            .contains("max-queues"));
        assert!(UserLimits::from_json(&json!({"max-channels": "x"})).is_err());
        limits.set(MAX_CHANNELS, 3).unwrap();
        limits.clear("all").unwrap();
        assert!(limits.is_empty());
    }
}
