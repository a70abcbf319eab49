pub mod leader_append_entries;
pub mod membership_is_quorum;
