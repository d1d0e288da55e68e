//! Connections and what they watch: `connect`, `disconnect`, `use`, `watch`, `ignore`.

use super::*;

impl Engine {
    /// A new connection: it uses and watches `default`.
    pub fn connect(&mut self, client: ClientId) {
        let default = self.tube_ref(&TubeName::default_tube());
        let tube = self.tube_mut(default);
        tube.using += 1;
        tube.watching += 1;
        self.total_connections += 1;
        self.clients.insert(
            client,
            Client {
                used: default,
                watched: vec![default],
                reserved: BTreeMap::new(),
                warned: 0,
                waiting: None,
                producer: false,
                worker: false,
            },
        );
    }

    /// A connection closed: its reserved jobs become ready again, its wait ends.
    pub fn disconnect(&mut self, now: Millis, client: ClientId) {
        self.advance(now);
        if self
            .clients
            .get(&client)
            .is_some_and(|c| c.waiting.is_some())
        {
            self.end_wait(client);
        }
        let Some(c) = self.clients.remove(&client) else {
            return;
        };
        // As beanstalkd: the jobs go back one at a time, in the order they were reserved, and
        // each goes to a waiting client (if one watches its tube) before the next is back.
        for id in c.reserved.into_values() {
            self.leave_state(id);
            self.enter_ready(id);
            self.serve_deferred();
        }
        self.tube_mut(c.used).using -= 1;
        self.drop_if_unused(c.used);
        for tube in c.watched {
            self.tube_mut(tube).watching -= 1;
            self.drop_if_unused(tube);
        }
    }

    /// `use <tube>`.
    pub fn use_tube(&mut self, now: Millis, client: ClientId, name: &TubeName) {
        self.advance(now);
        self.cmd.use_ += 1;
        let tube = self.tube_ref(name);
        let Some(c) = self.clients.get_mut(&client) else {
            return;
        };
        let old = mem::replace(&mut c.used, tube);
        self.tube_mut(tube).using += 1;
        self.tube_mut(old).using -= 1;
        self.drop_if_unused(old);
    }

    /// `watch <tube>`: returns the number of watched tubes.
    pub fn watch(&mut self, now: Millis, client: ClientId, name: &TubeName) -> usize {
        self.advance(now);
        self.cmd.watch += 1;
        let tube = self.tube_ref(name);
        let Some(c) = self.clients.get_mut(&client) else {
            return 0;
        };
        if !c.watched.contains(&tube) {
            c.watched.push(tube);
            let count = c.watched.len();
            let waiting = c.waiting;
            let t = self.tube_mut(tube);
            t.watching += 1;
            // The server never lets a waiting client send commands, but keep the engine
            // consistent if a caller does: the wait now covers the new tube too.
            if waiting.is_some() {
                t.add_waiter(client);
                self.to_serve.push(tube);
                self.serve_deferred();
            }
            return count;
        }
        let count = c.watched.len();
        self.drop_if_unused(tube);
        count
    }

    /// `ignore <tube>`: returns the number of watched tubes.
    ///
    /// # Errors
    ///
    /// [`Error::NotIgnored`] if it is the only watched tube.
    pub fn ignore(
        &mut self,
        now: Millis,
        client: ClientId,
        name: &TubeName,
    ) -> Result<usize, Error> {
        self.advance(now);
        self.cmd.ignore += 1;
        let Some(c) = self.clients.get_mut(&client) else {
            return Err(Error::NotFound);
        };
        let tube = self.tube_ids.get(name).copied();
        let Some(pos) = tube.and_then(|t| c.watched.iter().position(|&w| w == t)) else {
            return Ok(c.watched.len()); // not watched: nothing to do
        };
        if c.watched.len() == 1 {
            return Err(Error::NotIgnored);
        }
        // As beanstalkd's watch list: the last watched tube takes the ignored one's place
        // (`list-tubes-watched` shows that order).
        let tube = c.watched.swap_remove(pos);
        let count = c.watched.len();
        let waiting = c.waiting;
        let t = self.tube_mut(tube);
        t.watching -= 1;
        if waiting.is_some() {
            t.remove_waiter(client);
        }
        self.drop_if_unused(tube);
        Ok(count)
    }
}
