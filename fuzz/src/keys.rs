//! Cluster keys and published key sets: read from configuration files and from peers' JWKS
//! documents.

use waitingroom_core::{ClusterKey, VerifyingKeySet};

/// Input: text, read both as a cluster key and as a JWKS document. A key that parses must sign
/// what its own key set verifies; a key set that parses must read back from what it publishes.
pub fn cluster_key(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(key) = ClusterKey::parse(&text) {
        let signature = key.sign_bytes(data);
        let set = key.verifying_keys();
        assert!(set.verify_bytes(key.kid(), data, &signature).is_ok());
        let again = ClusterKey::parse(&key.to_pkcs8_pem()).expect("own PEM parses");
        assert_eq!(again.kid(), key.kid());
    }
    if let Ok(set) = VerifyingKeySet::from_jwks_json(&text) {
        let published = set.jwks().to_string();
        let again = VerifyingKeySet::from_jwks_json(&published).expect("own JWKS parses");
        assert!(again.kids().eq(set.kids()));
    }
}
