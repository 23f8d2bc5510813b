//! The mover: the one interface through which file data moves between DRAM and the
//! region. The file system decides *what* to copy; a mover decides *who* copies and
//! *when* the caller gets control back. This issue provides the synchronous `cpu`
//! mover (NOVA's data path); the engine-backed modes plug in here.

use pmem::Pmem;

/// A copy into the region: `src` goes to region byte offset `dst`.
pub struct WritePiece<'a> {
    pub dst: u64,
    pub src: &'a [u8],
}

/// A copy out of the region: region byte offset `src` fills `dst`.
pub struct ReadPiece<'a> {
    pub src: u64,
    pub dst: &'a mut [u8],
}

/// Who moves file data.
pub trait Mover: Send + Sync {
    /// Short name of the mode (`cpu`, …).
    fn name(&self) -> &'static str;

    /// Copies every piece into the region; all of it is durable when this returns.
    fn write(&self, pm: &dyn Pmem, pieces: &[WritePiece<'_>]);

    /// Copies every piece out of the region.
    fn read(&self, pm: &dyn Pmem, pieces: &mut [ReadPiece<'_>]);
}

/// The calling thread copies, with non-temporal stores into the region and one fence
/// for the whole request.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuMover;

impl Mover for CpuMover {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn write(&self, pm: &dyn Pmem, pieces: &[WritePiece<'_>]) {
        for p in pieces {
            pm.copy_nt(p.dst, p.src);
        }
        pm.fence();
    }

    fn read(&self, pm: &dyn Pmem, pieces: &mut [ReadPiece<'_>]) {
        for p in pieces {
            pm.read(p.src, p.dst);
        }
    }
}
