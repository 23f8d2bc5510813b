//! `cpu` mode (NOVA): the calling thread copies, with non-temporal stores into the
//! region and one fence per request (or none, where the file system's own fence covers
//! the data).

use std::sync::Arc;

use pmem::Pmem;

use crate::{
    cpu_read, cpu_write, cpu_write_unfenced, Client, Mode, Mover, Pending, ReadPiece, WritePiece,
};

/// The calling thread copies.
pub struct CpuMover {
    pm: Arc<dyn Pmem>,
}

impl CpuMover {
    /// A mover that copies on the calling thread into and out of `pm`.
    pub fn new(pm: Arc<dyn Pmem>) -> CpuMover {
        CpuMover { pm }
    }
}

impl Mover for CpuMover {
    fn mode(&self) -> Mode {
        Mode::Cpu
    }

    fn completes_on_return(&self) -> bool {
        true
    }

    unsafe fn start_write(&self, pieces: &[WritePiece<'_>]) -> Pending {
        cpu_write(&*self.pm, pieces);
        Pending::Done
    }

    unsafe fn start_write_unfenced(&self, _: Client, pieces: &[WritePiece<'_>]) -> Pending {
        cpu_write_unfenced(&*self.pm, pieces);
        Pending::Done
    }

    unsafe fn start_read(&self, pieces: &mut [ReadPiece<'_>]) -> Pending {
        cpu_read(&*self.pm, pieces);
        Pending::Done
    }
}
