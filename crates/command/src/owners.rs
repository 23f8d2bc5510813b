//! Owner and group names as `ls -l` shows them: from the password and group databases
//! (NSS, as the C library looks them up), the number where there is no entry; each
//! looked up once per listing.

use std::collections::HashMap;

use nix::unistd::{Gid, Group, Uid, User};

/// Width `ls -l` pads an owner or group to in the listings of this command.
const WIDTH: usize = 8;

/// The names looked up so far.
#[derive(Default)]
pub struct Owners {
    users: HashMap<u32, String>,
    groups: HashMap<u32, String>,
}

impl Owners {
    /// The owner's column: the user's name, left-aligned, or the number, right-aligned.
    pub fn user(&mut self, uid: u32) -> &str {
        self.users.entry(uid).or_insert_with(|| {
            let name = User::from_uid(Uid::from_raw(uid)).ok().flatten();
            column(name.map(|u| u.name), uid)
        })
    }

    /// The group's column, as [`Owners::user`]'s.
    pub fn group(&mut self, gid: u32) -> &str {
        self.groups.entry(gid).or_insert_with(|| {
            let name = Group::from_gid(Gid::from_raw(gid)).ok().flatten();
            column(name.map(|g| g.name), gid)
        })
    }
}

/// As GNU ls pads them: a name on the left, a number on the right.
fn column(name: Option<String>, id: u32) -> String {
    match name {
        Some(n) => format!("{n:<WIDTH$}"),
        None => format!("{id:>WIDTH$}"),
    }
}
