//! Tubes, created on first use and dropped when unused (never `default`), and the job table.

use super::*;

impl Engine {
    /// The tube called `name`, created if needed.
    pub(super) fn tube_ref(&mut self, name: &TubeName) -> TubeId {
        if let Some(&id) = self.tube_ids.get(name) {
            return id;
        }
        let tube = Tube::new(name.clone());
        let id = match self.free_tubes.pop() {
            Some(id) => {
                self.tubes[id as usize] = Some(tube);
                id
            }
            None => {
                self.tubes.push(Some(tube));
                (self.tubes.len() - 1) as TubeId
            }
        };
        self.tube_ids.insert(name.clone(), id);
        self.tube_order.push(id);
        id
    }

    /// Deletes the tube if it has no jobs and nobody refers to it (never `default`).
    pub(super) fn drop_if_unused(&mut self, tube: TubeId) {
        let Some(t) = self.tubes[tube as usize].as_ref() else {
            return;
        };
        if t.is_unused() && t.name.as_str() != "default" {
            // A pause does not keep a tube alive (as in beanstalkd); its timer goes with it.
            if let Some(pause) = t.paused {
                self.wheel.remove(pause.timer);
            }
            let name = t.name.clone();
            self.tube_ids.remove(&name);
            self.tubes[tube as usize] = None;
            self.free_tubes.push(tube);
            if let Some(at) = self.tube_order.iter().position(|&t| t == tube) {
                self.tube_order.swap_remove(at);
            }
        }
    }

    pub(super) fn tube(&self, tube: TubeId) -> &Tube {
        self.tubes[tube as usize].as_ref().expect("tube exists")
    }

    pub(super) fn tube_mut(&mut self, tube: TubeId) -> &mut Tube {
        self.tubes[tube as usize].as_mut().expect("tube exists")
    }

    /// Registers a new job (not yet in any state's queue) and counts it.
    pub(super) fn add_job(&mut self, id: JobId, job: Job) {
        let tube = job.tube;
        self.jobs.insert(id, job);
        self.tube_mut(tube).total_jobs += 1;
        self.total_jobs += 1;
    }

    pub(super) fn job_mut(&mut self, id: JobId) -> &mut Job {
        self.jobs.get_mut(&id).expect("job exists")
    }
}
