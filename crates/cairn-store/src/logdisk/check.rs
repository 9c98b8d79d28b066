//! `fsck` and `inspect` for log-disk images.
