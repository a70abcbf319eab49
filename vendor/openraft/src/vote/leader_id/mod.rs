pub mod leader_id_adv;
pub mod leader_id_std;

pub(crate) mod leader_id_cmp;
pub(crate) mod raft_committed_leader_id;
pub(crate) mod raft_leader_id;
