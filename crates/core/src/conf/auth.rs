//! `userlist` sections as plain data: users, their secrets, and the groups they are in.

/// One `userlist NAME` section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Userlist {
    pub name: String,
    /// `group NAME`, in order; users name them by index.
    pub groups: Vec<String>,
    pub users: Vec<User>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    /// `None`: a user without a password, who never authenticates.
    pub secret: Option<Secret>,
    /// Indices into [`Userlist::groups`].
    pub groups: Vec<usize>,
}

/// How a user's password is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Secret {
    /// `password HASH`: a crypt(3) hash (`$6$...` SHA-512, `$5$` SHA-256, `$1$` MD5,
    /// `$2b$` bcrypt, `$y$` yescrypt, ...).
    Crypt(String),
    /// `insecure-password TEXT`.
    Clear(String),
}
