// The demo corpus's words: the data tables its texts are drawn from, checked once at load.

/**
 * Twenty categories of forty words each. Real words rather than generated syllables so that the
 * demo's results read like content; every word belongs to exactly one list (checked at load time),
 * which is what makes a text query point at one category.
 */
const CATEGORY_WORDS: Record<string, string> = {
  music:
    'jazz piano guitar melody chord rhythm drummer bass vinyl album concert symphony orchestra violin saxophone lyrics chorus tempo harmony playlist remix vocalist ballad acoustic riff amplifier trumpet cello opera microphone setlist encore synthesizer duet soprano conductor banjo ukulele turntable bluegrass',
  cooking:
    'recipe pasta garlic oven skillet braise sauce dough bake simmer spices oregano basil noodle dumpling broth stew butter flour caramel marinade grill brisket tofu curry risotto pastry sourdough whisk saute chili lentil omelette custard glaze vinaigrette seasoning ferment paprika cinnamon',
  travel:
    'passport airport luggage itinerary hostel island beach backpacking cruise visa sightseeing landmark ferry railway roadtrip campsite glacier desert safari lagoon villa resort souvenir compass jetlag layover boarding terminal embassy canyon volcano fjord harbor archipelago nomad tourist hotel airline postcard motel',
  fitness:
    'workout squat deadlift treadmill cardio protein stretching yoga pilates kettlebell dumbbell barbell marathon sprint endurance muscle calories hydration plank pushup pullup lunges crossfit abs biceps triceps rowing cycling recovery warmup cooldown stamina trainer gym reps lifting mobility hiit posture jogging',
  gaming:
    'console controller joystick speedrun multiplayer esports quest dungeon boss respawn loot shooter platformer rpg arcade pixel leaderboard patch mod sandbox raid guild avatar headset streamer checkpoint combo hitbox lag clan cartridge handheld sidequest inventory crafting gamepad roguelike emulator achievement minecraft',
  science:
    'physics chemistry biology molecule atom quantum telescope galaxy planet experiment hypothesis laboratory microscope genome cell neuron evolution fossil asteroid comet orbit gravity particle electron photon enzyme bacteria virus ecosystem species entropy relativity spectrum isotope catalyst nebula supernova vaccine astronomy geology',
  finance:
    'stocks bonds dividend portfolio budget savings mortgage inflation interest investing crypto bitcoin etf retirement pension taxes credit debt loan equity broker trading hedge valuation earnings revenue venture banking currency forex recession bullish bearish fintech annuity liquidity insurance accounting payroll fiscal',
  fashion:
    'dress denim sneakers runway designer outfit couture tailoring fabric silk leather jacket handbag accessories jewelry necklace earrings makeup lipstick skincare hairstyle streetwear thrift boutique lookbook fragrance perfume heels boots scarf sweater knitwear wardrobe stylist capsule blazer sunglasses tote embroidery cardigan',
  film: 'movie cinema director screenplay actor actress trailer premiere blockbuster documentary animation sequel franchise boxoffice oscar cinematography soundtrack thriller horror romcom western noir casting scene script storyboard projector popcorn critic remake villain superhero hollywood matinee subtitles cameo stuntman filmmaker dubbing biopic',
  books:
    'novel author poetry fiction nonfiction chapter paperback hardcover library bookshelf memoir biography publisher bestseller mystery fantasy scifi literature bookclub audiobook ebook prose narrator protagonist plot sonnet anthology essay literary paragraph bookstore typewriter quill dystopia fable saga haiku novella epilogue librarian',
  gardening:
    'garden seeds compost soil tomato seedling greenhouse mulch pruning watering perennial bulbs orchid succulent cactus herbs lettuce harvest fertilizer weeds shovel trowel hose sprout vine blossom tulip rose lavender hydrangea pollinator bees orchard lawn trellis planter raised hedgerow zucchini daffodil',
  pets: 'dog cat puppy kitten leash collar grooming veterinarian aquarium hamster parrot rabbit fetch kibble treats litter shelter breed terrier retriever labrador poodle beagle tabby whiskers paw tail bark meow cage goldfish guineapig ferret turtle obedience crate chew catnip doghouse petsitter',
  tech: 'software laptop smartphone processor javascript python database cloud kubernetes api browser algorithm compiler gadget chip semiconductor robotics android iphone linux keyboard monitor wifi bluetooth router encryption cybersecurity opensource github framework debugging backend frontend devops firmware smartwatch drone typescript startup programming',
  art: 'painting canvas sculpture gallery watercolor acrylic sketch portrait easel brush charcoal mural exhibition curator abstract impressionism pottery ceramics clay collage etching lithograph palette pigment fresco mosaic calligraphy illustration graffiti installation artist masterpiece cubism surrealism gouache pastel printmaking origami museum renaissance',
  sports:
    'football soccer basketball baseball tennis golf hockey rugby cricket playoffs championship stadium referee goalkeeper quarterback touchdown homerun slamdunk penalty league season coach athlete olympics medal scoreboard dribble tackle inning wicket offside halftime fans jersey rookie draft umpire tournament racket volleyball',
  history:
    'ancient medieval empire dynasty pharaoh castle knight revolution archaeology artifact civilization monarchy treaty battle colonial viking samurai rome egypt pyramid byzantine crusade feudal parliament chronicle archive heritage monument emperor kingdom siege relic industrial coldwar manuscript chivalry legion gladiator aztec sultan',
  parenting:
    'toddler newborn baby diaper stroller bedtime lullaby nursery preschool homework tantrum breastfeeding pacifier crib milestones siblings teenager playdate daycare babysitter naptime potty kindergarten sleepover allowance chores carseat highchair teething storytime grandparents screentime fatherhood motherhood twins playground adoption parenting pregnancy infant',
  cars: 'engine sedan suv hatchback horsepower torque transmission turbo brakes tires electric gasoline mileage dealership roadster convertible pickup truck motorsport racing dashboard ignition exhaust radiator clutch gearbox chassis suspension headlights windshield garage mechanic oilchange coupe detailing carwash rally minivan odometer spoiler',
  photography:
    'lens aperture shutter exposure tripod dslr mirrorless landscape bokeh lightroom zoom flash iso focus composition darkroom negative polaroid telephoto macro wideangle histogram sensor megapixel viewfinder panorama timelapse selfie silhouette photographer snapshot filmroll headshot backlight lightbox monochrome photobook reflector gimbal vignette',
  comedy:
    'standup sitcom joke punchline comedian improv satire parody prank meme laughter hilarious sarcasm pun heckler openmic monologue spoof slapstick blooper deadpan comic cartoon skit lampoon wit banter giggle funny absurd goofy clown mime jester riddle limerick roastbattle sketchshow tickle chuckle',
};

/** Words that any item may use; they make texts less artificial and give BM25 common terms. */
const SHARED_WORDS =
  'new best guide tips how why top easy quick daily weekly ultimate beginner advanced story first time life world home week today free simple great little big love ideas secrets inside behind update live video episode part series real honest people things ways look watch try learn perfect classic modern favorite amazing everyday essential complete journey challenge'.split(
    ' ',
  );

export const CATEGORIES: readonly string[] = Object.freeze(Object.keys(CATEGORY_WORDS));
export const VOCABULARY: Readonly<Record<string, readonly string[]>> = Object.freeze(
  Object.fromEntries(Object.entries(CATEGORY_WORDS).map(([c, w]) => [c, Object.freeze(w.split(' '))])),
);
export const SHARED_VOCABULARY: readonly string[] = Object.freeze(SHARED_WORDS);

(function checkVocabulary(): void {
  const seen = new Map<string, string>();
  for (const w of SHARED_WORDS) seen.set(w, 'shared');
  for (const [cat, words] of Object.entries(VOCABULARY)) {
    if (words.length !== 40) throw new Error(`vocabulary of ${cat} has ${words.length} words, expected 40`);
    for (const w of words) {
      if (!/^[a-z]+$/.test(w)) throw new Error(`vocabulary word ${JSON.stringify(w)} is not one lowercase token`);
      const other = seen.get(w);
      if (other !== undefined) throw new Error(`vocabulary word ${w} is in both ${other} and ${cat}`);
      seen.set(w, cat);
    }
  }
})();
