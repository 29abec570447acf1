//! The event trace: every processed event and every admission is folded into a hash (so a test
//! can tell two runs apart byte for byte), and optionally written out as text for debugging.

use std::io::Write;

/// A word-at-a-time multiplicative hash (the FxHash step): fast, and stable across Rust
/// versions and platforms, unlike `DefaultHasher`. It only has to tell runs apart, not resist
/// an adversary.
pub struct Trace {
    hash: u64,
    out: Option<Box<dyn Write + Send>>,
}

impl Default for Trace {
    fn default() -> Self {
        Trace {
            hash: 0xcbf2_9ce4_8422_2325,
            out: None,
        }
    }
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Trace({})", self.hex())
    }
}

impl Trace {
    /// A trace that also writes one line per record to `out`.
    pub fn writing_to(out: Box<dyn Write + Send>) -> Self {
        Trace {
            out: Some(out),
            ..Trace::default()
        }
    }

    /// Records one event: a kind tag and a few numbers. Inline, so that where it is inlined
    /// the tag of a literal kind is worked out at compile time (two notes per check-in).
    #[inline]
    pub fn note(&mut self, time: u64, kind: &str, values: &[u64]) {
        self.word(time);
        self.word(tag(kind));
        for &v in values {
            self.word(v);
        }
        if let Some(out) = self.out.as_mut() {
            // A failing debug writer must not change the run: ignore write errors.
            let _ = write!(out, "{time} {kind}");
            for v in values {
                let _ = write!(out, " {v}");
            }
            let _ = writeln!(out);
        }
    }

    /// Records a line of free text (written out only; hashed too).
    pub fn text(&mut self, time: u64, text: &str) {
        self.word(time);
        self.bytes(text.as_bytes());
        if let Some(out) = self.out.as_mut() {
            let _ = writeln!(out, "{time} {text}");
        }
    }

    /// Whether a text writer is attached (callers skip formatting otherwise).
    pub fn verbose(&self) -> bool {
        self.out.is_some()
    }

    fn word(&mut self, v: u64) {
        self.hash = (self.hash.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }

    fn bytes(&mut self, b: &[u8]) {
        // Free text only: event kinds go through `tag`.
        for chunk in b.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.word(u64::from_le_bytes(w));
        }
        self.word(b.len() as u64);
    }

    /// The hash so far, as 16 hex digits.
    pub fn hex(&self) -> String {
        format!("{:016x}", self.hash)
    }

    /// Flushes the text writer.
    pub fn flush(&mut self) {
        if let Some(out) = self.out.as_mut() {
            let _ = out.flush();
        }
    }
}

/// An event kind as one word: its length and first eight bytes (kinds are short, fixed names).
fn tag(kind: &str) -> u64 {
    let b = kind.as_bytes();
    let mut w = [0u8; 8];
    let n = b.len().min(8);
    w[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(w) ^ ((b.len() as u64) << 56)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_records_same_hash() {
        let mut a = Trace::default();
        let mut b = Trace::default();
        a.note(1, "x", &[2, 3]);
        b.note(1, "x", &[2, 3]);
        assert_eq!(a.hex(), b.hex());
        b.note(1, "x", &[2]);
        assert_ne!(a.hex(), b.hex());
    }
}
