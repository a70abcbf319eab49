//! The users the API authenticates and what they may see, from the broker's access control
//! (users with hashed passwords and tags, permissions per vhost).

use crate::auth::Identity;
use std::sync::Arc;
use warren_broker::access::AccessControl;

pub struct Accounts {
    access: Arc<AccessControl>,
    loopback_users: Vec<String>,
}

impl Accounts {
    pub fn new(access: Arc<AccessControl>, loopback_users: Vec<String>) -> Accounts {
        Accounts {
            access,
            loopback_users,
        }
    }

    pub fn authenticate(&self, user: &str, password: &str) -> Option<Identity> {
        let user = self.access.authenticate(user, password).ok()?;
        Some(Identity {
            name: user.name.clone(),
            tags: user.tags.clone(),
        })
    }

    /// Users allowed only from loopback addresses (RabbitMQ's loopback_users).
    pub fn loopback_only(&self, user: &str) -> bool {
        self.loopback_users.iter().any(|u| u == user)
    }

    /// Whether `user` has any permission in `vhost`: users without the monitoring tag see
    /// only those vhosts' objects.
    pub fn can_access_vhost(&self, user: &str, vhost: &str) -> bool {
        self.access.check_vhost(user, vhost)
    }
}
