// Rust names for the demangling tests.
#[inline(never)]
pub fn crunch(x: u64) -> u64 {
    x.wrapping_mul(2654435761).rotate_left(7)
}

mod inner {
    pub struct Widget(pub u64);
    impl Widget {
        #[inline(never)]
        pub fn spin(&self) -> u64 {
            super::crunch(self.0)
        }
    }
}

fn main() {
    let w = inner::Widget(std::env::args().count() as u64);
    std::process::exit((w.spin() & 1) as i32);
}
