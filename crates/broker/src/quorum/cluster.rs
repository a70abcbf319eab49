//! This node as a member of a cluster: its name and id, the cluster transport, and its member
//! of the metadata group, with how a cluster forms and how nodes are added and forgotten.
//!
//! Node ids are derived from node names (the first 8 bytes of a SHA-256), so a node keeps its
//! id across restarts without storing it. Seeds (`--cluster-peers`) are addresses only; the
//! handshake tells who answers there, and a seed where this node itself answers is skipped, so
//! every node may be given the same list (one configuration file for the whole cluster, as a
//! StatefulSet or RabbitMQ's classic_config peer discovery has it). Formation is deterministic and safe on restart:
//!
//! - a node whose metadata member has state (a log, a snapshot, a vote) never initializes;
//! - every uninitialized node asks the seeds to add it (forwarded to the leader) until one
//!   does: each node announces its own name and address, so the membership carries them;
//! - only when no seed is in a cluster yet and every seed answered does the node whose id is
//!   the lowest of itself and its seeds initialize the metadata group with itself as the only
//!   member (so a wiped node with the lowest id joins the running cluster, not a new one).
//!
//! Each node also has an incarnation: a random number drawn when its data directory is new
//! ([`load_or_create_incarnation`]), sent in every cluster handshake and recorded with the
//! node's name and address in the metadata membership when it joins. A peer presenting another
//! incarnation than the one recorded for its id is a node whose data was wiped: it is refused
//! before any Raft message reaches either side (its empty logs would otherwise stop the
//! leaders' Raft cores with "follower log reversion"), with the operator's way out in the log
//! line on both sides — forget it, then restart it, and it joins as a new node. The record
//! lives in the membership rather than the definitions because it belongs to the membership:
//! it is written by the same change that adds the node and dropped by the one that forgets it.
//!
//! A watcher keeps this node linked to every member the membership lists (the lower id dials;
//! a higher one probes when no link is up, since the lower may not know its address yet).

use std::collections::BTreeSet;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use warren_quorum::metadata::{
    MemberChange, MemberInfo, MetadataGroup, MetadataMachine, MetadataStatus, METADATA_GROUP,
};
use warren_quorum::network::{
    GroupRegistry, NodeTransport, RaftRequest, RaftResponse, Transport, TransportError,
};
use warren_quorum::tcp::TcpTransport;
use warren_quorum::types::NodeId;

use super::QuorumHost;

/// How often formation and the membership watcher look again.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// A node's id in the cluster: the first 8 bytes of a SHA-256 of its name.
pub fn node_id(name: &str) -> NodeId {
    let digest = Sha256::digest(name.as_bytes());
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(id)
}

/// The file in the node's quorum data directory holding its incarnation.
const INCARNATION_FILE: &str = "incarnation";

/// This node's incarnation: read from `dir`, or drawn (random, never 0) and stored there
/// durably when the directory has none — a new data directory, or a wiped one.
pub fn load_or_create_incarnation(dir: &Path) -> std::io::Result<u64> {
    let path = dir.join(INCARNATION_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            return text.trim().parse().map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: not an incarnation number: {e}", path.display()),
                )
            })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(dir)?;
    let incarnation = loop {
        let drawn: u64 = rand::random();
        if drawn != 0 {
            break drawn;
        }
    };
    // Written whole, then renamed: a crash leaves the old state or the new, never half a file.
    let partial = dir.join(format!("{INCARNATION_FILE}.partial"));
    let mut file = std::fs::File::create(&partial)?;
    file.write_all(format!("{incarnation}\n").as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&partial, &path)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(incarnation)
}

/// The refusal of a peer presenting another incarnation than the recorded one (both sides log
/// it; the refused side gets the same instructions from its handshake).
pub fn reset_refusal(name: &str, presented: u64, recorded: u64) -> String {
    format!(
        "node {name} was reset (its data is new): run `warren ctl forget_cluster_node {name}` \
         on a running node, then restart it (it presents incarnation {presented}, the cluster \
         recorded {recorded})"
    )
}

/// One member of the cluster as `cluster_status` shows it.
#[derive(Clone, Debug)]
pub struct ClusterMember {
    pub name: String,
    pub id: NodeId,
    pub address: String,
    /// This node itself, or a peer the failure detector sees up.
    pub running: bool,
    pub voter: bool,
    pub leader: bool,
    /// The last log index the leader knows the member has (absent on followers).
    pub matched_index: Option<u64>,
    /// How far the member is behind the leader's log, in entries (absent on followers).
    pub lag: Option<u64>,
    /// For a running peer: how long the failure detector has seen it up without a break (a
    /// lower bound of its uptime, as this node cannot ask it); None for this node itself
    /// and for peers that are down.
    pub up_for_ms: Option<u64>,
}

/// The cluster as this node sees it.
#[derive(Clone, Debug)]
pub struct ClusterStatus {
    pub node: String,
    pub node_id: NodeId,
    pub leader: Option<String>,
    pub term: u64,
    pub state: String,
    pub last_log_index: Option<u64>,
    pub last_applied_index: Option<u64>,
    pub members: Vec<ClusterMember>,
}

/// What a seed answered this node's request to join.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JoinAnswer {
    /// This node is a member now.
    Joined,
    /// The seed is in no cluster yet (its metadata member has no state).
    SeedInNoCluster,
    /// Anything else: the seed is in a cluster that did not add this node this time (a change
    /// in flight, a leader being elected, a learner that did not catch up, a lost answer), or
    /// did not answer. Asked again at the next round.
    NotYet,
}

/// Whether a node in no cluster, whose seeds all answered their handshake, forms a new cluster
/// after asking them to add it (`answers`, in the order asked): only when it has the lowest id
/// among them and every one said it is in no cluster either. A seed in a cluster that failed
/// to add it this time is no licence: a wiped node (or a new node with a low name) would
/// otherwise start a second cluster beside its seeds' on one failed join — a split for good.
fn forms_the_cluster(me: NodeId, answers: &[(NodeId, JoinAnswer)]) -> bool {
    answers
        .iter()
        .all(|(seed, answer)| *seed > me && *answer == JoinAnswer::SeedInNoCluster)
}

/// This node's membership of a cluster.
pub struct ClusterNode {
    name: String,
    id: NodeId,
    incarnation: u64,
    advertised: String,
    transport: Arc<TcpTransport>,
    /// This node's running groups (the queue groups' members a membership change reaches).
    registry: GroupRegistry,
    metadata: MetadataGroup<NodeTransport>,
    /// None until this node is a member; then whether it formed the cluster (initialized the
    /// metadata group) rather than joining one.
    membership: tokio::sync::watch::Sender<Option<bool>>,
}

impl ClusterNode {
    /// Starts this node's metadata member on `host` (whose transport is `transport`), then
    /// forms or joins the cluster through `seeds` in the background.
    pub async fn start(
        host: &QuorumHost,
        name: &str,
        advertised: &str,
        transport: Arc<TcpTransport>,
        machine: Arc<dyn MetadataMachine>,
        seeds: Vec<String>,
    ) -> Result<Arc<ClusterNode>, String> {
        let metadata = host
            .node()
            .start_metadata_group(machine)
            .await
            .map_err(|e| e.to_string())?;
        let node = Arc::new(ClusterNode {
            name: name.to_string(),
            id: host.node_id(),
            incarnation: transport.incarnation(),
            advertised: advertised.to_string(),
            transport,
            registry: host.node().registry(),
            metadata,
            membership: tokio::sync::watch::Sender::new(None),
        });
        let weak = Arc::downgrade(&node);
        node.transport
            .set_admission(Arc::new(move |peer, incarnation| match weak.upgrade() {
                Some(node) => node.admit(peer, incarnation),
                None => Ok(()),
            }));
        tokio::spawn(node.clone().form(seeds));
        tokio::spawn(node.clone().watch_members());
        Ok(node)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// The cluster transport (forwarding links are dialled over it too).
    pub fn transport(&self) -> &Arc<TcpTransport> {
        &self.transport
    }

    pub fn metadata(&self) -> &MetadataGroup<NodeTransport> {
        &self.metadata
    }

    /// This node's running groups.
    pub fn registry(&self) -> &GroupRegistry {
        &self.registry
    }

    /// Waits until this node is a member of the cluster (at once on a restarted member);
    /// true when it formed the cluster itself, false when it joined one.
    pub async fn membership(&self) -> bool {
        let mut watch = self.membership.subscribe();
        let formed = match watch.wait_for(Option::is_some).await {
            Ok(formed) => formed.unwrap_or(false),
            // The sender lives as long as `self`.
            Err(_) => false,
        };
        formed
    }

    /// Waits until this node is a voter of the cluster's metadata group (at once on a member
    /// that has been one): until then it places no quorum queue, since the voters it sees are
    /// not yet the cluster's.
    pub async fn wait_voter(&self) {
        let mut metrics = self.metadata.raft().metrics();
        loop {
            let voter = metrics
                .borrow_and_update()
                .membership_config
                .membership()
                .voter_ids()
                .any(|id| id == self.id);
            if voter || metrics.changed().await.is_err() {
                return;
            }
        }
    }

    /// Whether this node is a voter of the cluster's metadata group now.
    pub fn is_voter(&self) -> bool {
        self.metadata
            .raft()
            .metrics()
            .borrow()
            .membership_config
            .membership()
            .voter_ids()
            .any(|id| id == self.id)
    }

    fn info(&self) -> MemberInfo {
        MemberInfo {
            name: self.name.clone(),
            addr: self.advertised.clone(),
            incarnation: self.incarnation,
        }
    }

    /// This node's incarnation (see the module's comment).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Whether peer `peer` presenting `incarnation` may link with this node: not when the
    /// membership recorded another incarnation for it (it was reset).
    fn admit(&self, peer: NodeId, incarnation: u64) -> Result<(), String> {
        let recorded = self
            .metadata
            .members()
            .into_iter()
            .find(|(id, _)| *id == peer);
        match recorded {
            Some((_, info)) if info.incarnation != 0 && info.incarnation != incarnation => {
                let refusal = reset_refusal(&info.name, incarnation, info.incarnation);
                tracing::error!(peer, "{refusal}");
                Err(refusal)
            }
            _ => Ok(()),
        }
    }

    async fn form(self: Arc<Self>, seeds: Vec<String>) {
        let mut ticker = tokio::time::interval(WATCH_INTERVAL);
        let mut announced_waiting = false;
        // Seeds whose node is known: each is probed again only while no link to it is up,
        // since every probe's connection replaces the pair's link (and fails the requests in
        // flight on it). Probing again matters: when a seed with a lower id replaced this
        // node's probe by its own connection and that one closed, nobody else redials — the
        // seed does not know this node's address until it is a member.
        let mut known: std::collections::HashMap<String, NodeId> = Default::default();
        loop {
            ticker.tick().await;
            match self.metadata.is_initialized().await {
                // A voter, not only a member: a join whose promotion did not happen (the
                // leader lost its place or the answer its way after adding this node as a
                // learner) is asked for again, else the node stays a learner for good.
                Ok(true) if self.is_voter() => {
                    self.membership.send_if_modified(|m| {
                        let first = m.is_none();
                        m.get_or_insert(false);
                        first
                    });
                    return;
                }
                Ok(true) => {
                    // Initialized and not (yet) a voter: a join in flight or half done, or
                    // forgotten.
                    if !announced_waiting {
                        tracing::info!(node = %self.name, "waiting to be added to the cluster");
                        announced_waiting = true;
                    }
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the metadata group's state");
                    return;
                }
            }
            let mut seed_ids = BTreeSet::new();
            let mut all_answered = true;
            for seed in &seeds {
                if let Some(id) = known.get(seed) {
                    // This node's own address (one seed list shared by every node names it).
                    if *id == self.id {
                        continue;
                    }
                    if self.transport.liveness().is_up(*id) {
                        seed_ids.insert(*id);
                        continue;
                    }
                }
                match self.discover(seed).await {
                    Ok(id) => {
                        known.insert(seed.clone(), id);
                        seed_ids.insert(id);
                    }
                    // A refused handshake is a configuration error (another secret): say so.
                    Err(e) if e.contains("handshake failed") => {
                        all_answered = false;
                        tracing::error!(%seed, error = %e, "cluster seed refused this node");
                    }
                    Err(e) => {
                        all_answered = false;
                        tracing::debug!(%seed, error = %e, "cluster seed not answering");
                    }
                }
            }
            seed_ids.remove(&self.id);
            // Joining comes first, even for the lowest id: a node whose data was wiped (or a
            // new node with a low name) must join the cluster its seeds already form, not
            // start a second one beside it.
            let mut answers = Vec::with_capacity(seed_ids.len());
            for seed in seed_ids.iter().copied() {
                let answer = self.ask_to_join(seed).await;
                answers.push((seed, answer));
                if answer == JoinAnswer::Joined {
                    tracing::info!(node = %self.name, via = seed, "joined the cluster");
                    break;
                }
            }
            let initialized = matches!(self.metadata.is_initialized().await, Ok(true));
            if !initialized && all_answered && forms_the_cluster(self.id, &answers) {
                match self.metadata.initialize(&[(self.id, self.info())]).await {
                    Ok(()) => {
                        tracing::info!(
                            node = %self.name,
                            "formed a new cluster: this node has the lowest id among its seeds"
                        );
                        self.membership.send_replace(Some(true));
                    }
                    Err(e) => tracing::warn!(error = %e, "initializing the cluster failed"),
                }
            }
        }
    }

    /// Asks `peer` (or the leader it names) to add this node.
    async fn ask_to_join(&self, mut peer: NodeId) -> JoinAnswer {
        for _ in 0..3 {
            let request = RaftRequest::ChangeMembers(MemberChange::Add {
                node: self.id,
                info: self.info(),
            });
            let transport = NodeTransport::Tcp(self.transport.clone());
            match transport.send(self.id, peer, METADATA_GROUP, request).await {
                Ok(RaftResponse::MembersChanged { .. }) => return JoinAnswer::Joined,
                Err(TransportError::NotLeader {
                    leader: Some(leader),
                    ..
                }) if leader != peer => peer = leader,
                Err(TransportError::NotInitialized(_)) => return JoinAnswer::SeedInNoCluster,
                Err(e) => {
                    tracing::debug!(peer, error = %e, "join request not carried out");
                    return if self.is_voter() {
                        JoinAnswer::Joined
                    } else {
                        JoinAnswer::NotYet
                    };
                }
                Ok(_) => return JoinAnswer::NotYet,
            }
        }
        JoinAnswer::NotYet
    }

    async fn discover(&self, addr: &str) -> Result<NodeId, String> {
        let resolved = self.transport.resolve(addr).await?;
        self.transport.discover(resolved).await
    }

    /// Keeps links to every member the membership lists.
    async fn watch_members(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(WATCH_INTERVAL);
        loop {
            ticker.tick().await;
            for (id, info) in self.metadata.members() {
                if id == self.id || self.transport.liveness().is_up(id) {
                    continue;
                }
                let Ok(addr) = self.transport.resolve(&info.addr).await else {
                    continue;
                };
                if id > self.id {
                    self.transport.add_peer(id, addr);
                } else if let Err(e) = self.transport.discover(addr).await {
                    tracing::debug!(peer = id, %addr, error = %e, "cluster member not answering");
                }
            }
        }
    }

    /// The name of member `id`, if the membership lists it.
    pub fn member_name(&self, id: NodeId) -> Option<String> {
        self.metadata
            .members()
            .into_iter()
            .find(|(member, _)| *member == id)
            .map(|(_, info)| info.name)
    }

    /// Whether node `id` is this one or a peer the failure detector sees up.
    pub fn is_running(&self, id: NodeId) -> bool {
        id == self.id || self.transport.liveness().is_up(id)
    }

    /// The cluster as this node sees it.
    pub fn status(&self) -> ClusterStatus {
        let status: MetadataStatus = self.metadata.status();
        let leader_index = status.last_log_index;
        let name_of = |id: NodeId| {
            status
                .members
                .iter()
                .find(|m| m.node == id)
                .map(|m| m.info.name.clone())
        };
        let members = status
            .members
            .iter()
            .map(|member| ClusterMember {
                name: member.info.name.clone(),
                id: member.node,
                address: member.info.addr.clone(),
                running: member.node == self.id || self.transport.liveness().is_up(member.node),
                voter: member.voter,
                leader: status.leader == Some(member.node),
                matched_index: member.matched_index,
                lag: member
                    .matched_index
                    .zip(leader_index)
                    .map(|(matched, last)| last.saturating_sub(matched)),
                up_for_ms: (member.node != self.id)
                    .then(|| self.transport.liveness().status(member.node))
                    .flatten()
                    .filter(|peer| peer.up)
                    .map(|peer| peer.since.elapsed().as_millis() as u64),
            })
            .collect();
        ClusterStatus {
            node: self.name.clone(),
            node_id: self.id,
            leader: status.leader.and_then(name_of),
            term: status.term,
            state: format!("{:?}", status.state).to_lowercase(),
            last_log_index: status.last_log_index,
            last_applied_index: status.last_applied_index,
            members,
        }
    }

    /// Adds the node `name` listening at `addr` (it must be running, with cluster port and the
    /// same secret) — from any member.
    pub async fn add_node(&self, name: &str, addr: &str) -> Result<(), String> {
        validate_name(name)?;
        let id = node_id(name);
        // Checks that `name` is who answers at `addr`, and links this node to it.
        let found = self.discover(addr).await?;
        if found != id {
            return Err(format!(
                "the node at {addr} is not {name} (its id is {found}, {name}'s would be {id})"
            ));
        }
        self.metadata
            .add_member(
                id,
                MemberInfo {
                    name: name.to_string(),
                    addr: addr.to_string(),
                    incarnation: self.transport.peer_incarnation(id).unwrap_or(0),
                },
            )
            .await
            .map_err(|e| e.to_string())
    }

    /// The id of member `name`, or why it is none.
    fn member_id(&self, name: &str) -> Result<NodeId, String> {
        let id = node_id(name);
        if self
            .metadata
            .members()
            .iter()
            .any(|(member, _)| *member == id)
        {
            Ok(id)
        } else {
            Err(format!("{name} is not a member of the cluster"))
        }
    }

    /// Removes the node `name` from the cluster (RabbitMQ's forget_cluster_node): first from
    /// every quorum queue group of `groups` it is a member of (RabbitMQ's shrink_all; each
    /// group's new members recorded in `broker`'s definitions), then from the membership. Refused while the node is running (connected), as RabbitMQ refuses it.
    ///
    /// The groups go first (RabbitMQ shrinks after): once the membership forgets a node, its
    /// recorded incarnation goes too, and a wiped node waiting at the door joins at once — it
    /// must not find itself still a member of a group, whose leader would meet its empty log.
    pub async fn forget_node(
        &self,
        name: &str,
        broker: &dyn super::membership::MembersRecord,
        groups: &[super::membership::QuorumGroup],
    ) -> Result<Vec<super::membership::GroupChange>, String> {
        let id = self.member_id(name)?;
        if self.is_running(id) {
            return Err(format!(
                "{{failed_to_remove_node,{name},{{active,\"Mnesia is running\",{name}}}}}: {name} \
                 is running (connected to this node); stop it first"
            ));
        }
        let changes = super::membership::shrink_all(self, broker, groups, id).await;
        let failed: Vec<String> = changes
            .iter()
            .filter_map(|c| match &c.result {
                Err(e) => Some(format!("{}/{}: {e}", c.vhost, c.queue)),
                Ok(()) => None,
            })
            .collect();
        if !failed.is_empty() {
            return Err(format!(
                "{name} is still a member of these quorum queues' groups (nothing was forgotten; \
                 run it again once their leaders are reachable): {}",
                failed.join("; ")
            ));
        }
        self.metadata
            .remove_member(id)
            .await
            .map_err(|e| e.to_string())?;
        Ok(changes)
    }

    /// Adds the member `name` to every quorum queue group of `groups` below its size
    /// (`rabbitmq-queues grow NODE all`), recording each group's new members in `broker`'s
    /// definitions; one result per queue it was added to or failed for.
    pub async fn grow_quorum_queues(
        &self,
        name: &str,
        broker: &dyn super::membership::MembersRecord,
        groups: &[super::membership::QuorumGroup],
    ) -> Result<Vec<super::membership::GroupChange>, String> {
        let id = self.member_id(name)?;
        if !self.is_running(id) {
            return Err(format!("{name} is not running: start it first"));
        }
        Ok(super::membership::grow_all(self, broker, groups, id).await)
    }

    /// Stops the metadata member and the transport.
    pub async fn shutdown(&self) {
        self.metadata.shutdown().await;
        self.transport.shutdown();
    }
}

impl super::host::MemberNames for ClusterNode {
    fn member_name(&self, id: NodeId) -> Option<String> {
        ClusterNode::member_name(self, id)
    }
}

/// Node names travel in the membership next to addresses: no whitespace, not empty.
pub fn validate_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().any(char::is_whitespace) {
        return Err(format!(
            "invalid node name {name:?}: it must be non-empty, without whitespace"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_lowest_id_forms_a_cluster_and_only_when_no_seed_is_in_one() {
        use JoinAnswer::*;
        // Every node started at once from one peer list: the lowest forms.
        assert!(forms_the_cluster(
            1,
            &[(2, SeedInNoCluster), (3, SeedInNoCluster)]
        ));
        // A peer list naming only the node itself.
        assert!(forms_the_cluster(1, &[]));
        // Not the lowest: it waits for the lowest to form.
        assert!(!forms_the_cluster(
            2,
            &[(1, SeedInNoCluster), (3, SeedInNoCluster)]
        ));
        // A wiped node (or a new one with a low name) whose seeds form a cluster that did not
        // add it this time (a change in flight, a lost answer): it asks again, it does not
        // start a second cluster beside theirs.
        assert!(!forms_the_cluster(1, &[(2, NotYet), (3, SeedInNoCluster)]));
        assert!(!forms_the_cluster(1, &[(2, SeedInNoCluster), (3, NotYet)]));
        assert!(!forms_the_cluster(1, &[(2, NotYet), (3, NotYet)]));
        assert!(!forms_the_cluster(1, &[(2, Joined)]));
    }

    #[test]
    fn an_incarnation_is_kept_with_the_data_and_new_with_new_data() {
        let dir = tempfile::tempdir().expect("tempdir");
        let quorum = dir.path().join("quorum");
        let first = load_or_create_incarnation(&quorum).expect("created");
        assert_ne!(first, 0);
        assert_eq!(load_or_create_incarnation(&quorum).expect("read"), first);
        std::fs::remove_dir_all(&quorum).expect("wipe");
        let wiped = load_or_create_incarnation(&quorum).expect("created again");
        assert_ne!(wiped, first);
        std::fs::write(quorum.join(INCARNATION_FILE), "not a number").expect("write");
        assert!(load_or_create_incarnation(&quorum).is_err());
    }
}
