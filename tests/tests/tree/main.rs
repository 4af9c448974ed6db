//! Checks on the repository's own tree rather than on the tracer: no import loops between
//! folders (`imports`), and README and docs linking only to files inside the repository
//! (`links`).

mod imports;
