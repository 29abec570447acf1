//! Cluster keys and published key sets: read from configuration files and from peers' JWKS
//! documents.

use waitingroom_core::{ClusterKey, KeyRing, VerifyingKeySet};

/// Input: text, read both as a cluster key and as a JWKS document. A key that parses must write itself back, and the peer
/// secret derived from it must authenticate a message (the input) only as it was, under its own
/// key id, also from a ring where it is a previous key; a key set that parses must read back from
/// what it publishes.
pub fn cluster_key(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(key) = ClusterKey::parse(&text) {
        let ring = KeyRing::new(key.clone());
        let tag = ring.peer_mac(&[data]);
        assert!(ring.verify_peer_mac(key.kid(), &[data], &tag).is_ok());
        assert!(
            ring.verify_peer_mac(key.kid(), &[data, b"!"], &tag)
                .is_err()
        );
        let rotated = KeyRing::with_previous(ClusterKey::from_seed([9; 32]), [key.clone()])
            .expect("thumbprint key ids of different keys differ");
        assert!(rotated.verify_peer_mac(key.kid(), &[data], &tag).is_ok());
        let again = ClusterKey::parse(&key.to_pkcs8_pem()).expect("own PEM parses");
        assert_eq!(again.kid(), key.kid());
    }
    if let Ok(set) = VerifyingKeySet::from_jwks_json(&text) {
        let published = set.jwks().to_string();
        let again = VerifyingKeySet::from_jwks_json(&published).expect("own JWKS parses");
        assert!(again.kids().eq(set.kids()));
    }
}
