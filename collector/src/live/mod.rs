//! placeholder
pub struct LiveState;
